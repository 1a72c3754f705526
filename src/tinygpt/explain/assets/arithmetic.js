// The arithmetic of one row: the selected position through the selected head, steps 1–7 of the
// walkthrough (explain.py) and, behind a toggle, its backward pass (explain --backward).

import { BACKWARD, backwardUnavailable, rowBackward } from "./backward.js";
import {
  C,
  CFG,
  contribAt,
  el,
  factor,
  fmt,
  glyph,
  HS,
  headAt,
  NH,
  quoted,
  rowAt,
  showTip,
  VOCAB,
} from "./base.js";
import { headName, rowArithmetic, topNext } from "./model.js";
import { chars, state } from "./state.js";

const SHOWN = 8; // a vector this long or shorter is written out whole; a longer one is a colour strip
const LARGEST = 3; // the terms of a long vector written out beside its strip

// a vector: written out whole when short; else a strip, one colour per dimension (blue positive, red
// negative, the deepest the largest in size), its LARGEST biggest terms written out, a click shows all
function vec(arr, start, len) {
  const values = Array.from(arr.subarray(start, start + len));
  if (len <= SHOWN) return el("span", { class: "vec", text: `[${values.map(fmt).join(", ")}]` });
  const biggest = Math.max(...values.map(Math.abs)) || 1;
  const strip = el("canvas", { class: "strip", width: len, height: 1 });
  const ctx = strip.getContext("2d");
  values.forEach((value, d) => {
    const depth = Math.abs(value) / biggest;
    ctx.fillStyle = value < 0 ? `rgba(200, 40, 30, ${depth})` : `rgba(31, 95, 191, ${depth})`;
    ctx.fillRect(d, 0, 1, 1);
  });
  strip.addEventListener("mousemove", (e) => {
    const rect = strip.getBoundingClientRect();
    const d = Math.max(0, Math.min(len - 1, Math.floor(((e.clientX - rect.left) / rect.width) * len)));
    showTip(e, `dimension ${d}: ${fmt(values[d])}`);
  });
  strip.addEventListener("mouseleave", () => {
    document.getElementById("tooltip").hidden = true;
  });
  const largest = values
    .map((value, d) => [d, value])
    .sort(([, a], [, b]) => Math.abs(b) - Math.abs(a))
    .slice(0, LARGEST);
  const short = `largest: ${largest.map(([d, value]) => `[${d}] ${fmt(value)}`).join(", ")} … of ${len}`;
  const full = `[${values.map(fmt).join(", ")}]`;
  const text = el("span", { class: "terms", title: "click to show every entry", text: short });
  const span = el("span", { class: "vec long" }, strip, text);
  span.addEventListener("click", () => {
    text.textContent = text.textContent === short ? full : short;
    span.classList.toggle("open");
  });
  return span;
}

export function line(label, ...parts) {
  return el("div", {}, el("span", { class: "eq", text: label }), ...parts);
}

// a table's header row; classOf(col) gives the class of column col
export function headerRow(labels, classOf) {
  return el("tr", {}, ...labels.map((label, col) => el("th", { class: classOf(col), text: label })));
}

// the first two cells of a row about key position j: j and its character
function keyCells(j, cs) {
  return [el("td", { text: String(j) }), el("td", { class: "l", text: glyph(cs[j]) })];
}

// mirrors tinygpt.explain.walkthrough.walkthrough
// The walkthrough of one row: position i through head hd of the selected layer, one function per step.
// Each step gets the same selection `sel` (see renderArithmetic) and returns its nodes.
export function renderArithmetic() {
  const { trace, layer, head: hd, token: i } = state;
  const lt = trace.layers[layer];
  const T = trace.T;
  const sel = { trace, layer, hd, i, T, cs: chars(), lt, row: rowArithmetic(lt.q, lt.k, lt.v, hd, i, T) };
  document.getElementById("arith").replaceChildren(
    el("p", {
      class: "lead",
      text: `Position ${i}, ${quoted(sel.cs[i])}, through layer ${layer}, head ${hd}. Every number is the model's own.`,
    }),
    ...embeddingStep(sel),
    ...layerNormStep(sel),
    ...qkvStep(sel),
    ...scoresStep(sel),
    ...softmaxStep(sel),
    ...outputStep(sel),
    ...predictionStep(sel),
    ...(state.backward ? backwardSteps(sel) : []),
  );
}

// 1. embedding, and the residual stream entering the layer
function embeddingStep({ trace, layer, i, cs, lt }) {
  const embedded = new Float64Array(C);
  for (let d = 0; d < C; d++) embedded[d] = trace.tok_emb[rowAt(i, d)] + trace.pos_emb[rowAt(i, d)];
  const nodes = [
    el("h3", { text: "1. Embedding: token embedding + position embedding" }),
    line(`wte[${quoted(cs[i])}] = `, vec(trace.tok_emb, rowAt(i), C)),
    line(`wpe[${i}] = `, vec(trace.pos_emb, rowAt(i), C)),
    line("x = wte + wpe = ", vec(embedded, 0, C)),
  ];
  if (layer > 0) {
    const earlier = layer === 1 ? "layer 0" : `layers 0…${layer - 1}`;
    nodes.push(
      line(
        `x entering layer ${layer}, after ${earlier} added attention and MLP outputs = `,
        vec(lt.resid, rowAt(i), C),
      ),
    );
  }
  return nodes;
}

// 2. layer norm ln_1
function layerNormStep({ i, lt }) {
  let mean = 0,
    sumSq = 0;
  for (let d = 0; d < C; d++) mean += lt.resid[rowAt(i, d)];
  mean /= C;
  for (let d = 0; d < C; d++) sumSq += (lt.resid[rowAt(i, d)] - mean) ** 2;
  return [
    el("h3", { text: `2. Layer norm ln_1: (x − mean) / √(var + 1e-5) · weight${CFG.bias ? " + bias" : ""}` }),
    line(`mean = ${fmt(mean)}, var = ${fmt(sumSq / C)}; ln_1(x) = `, vec(lt.ln_1, rowAt(i), C)),
  ];
}

// 3. q, k and v of the head
function qkvStep({ hd, i, T, lt }) {
  const at = headAt(T, hd, i);
  return [
    el("h3", { text: `3. Query, key and value of head ${hd} (${HS} dimensions each)` }),
    el("p", {
      class: "hint",
      text: "The query says what this character is looking for, each key what a character offers, each value what it passes on if chosen.",
    }),
    line("q = ", vec(lt.q, at, HS)),
    line("k = ", vec(lt.k, at, HS)),
    line("v = ", vec(lt.v, at, HS)),
  ];
}

// 4. scores: q · k_j / √HS, the first terms of each dot product written out
function scoresStep({ hd, i, T, cs, lt, row }) {
  const table = el(
    "table",
    {},
    headerRow(["j", "char", "q · k_j (first terms)", "= q · k_j", `/ √${HS}`], (col) => (col < 3 ? "l" : "")),
  );
  for (let j = 0; j < T; j++) {
    const masked = j > i;
    const terms = [];
    for (let d = 0; d < Math.min(3, HS); d++)
      terms.push(`${factor(lt.q[headAt(T, hd, i, d)])}×${factor(lt.k[headAt(T, hd, j, d)])}`);
    const written = masked
      ? "masked: a later position"
      : terms.join(" + ") + (HS > 3 ? ` + … (${HS} terms)` : "");
    table.append(
      el(
        "tr",
        { class: masked ? "masked" : "" },
        ...keyCells(j, cs),
        el("td", { class: "l", text: written }),
        el("td", { text: masked ? "" : fmt(row.dots[j]) }),
        el("td", { class: "s", text: fmt(row.scores[j]) }),
      ),
    );
  }
  return [el("h3", { text: `4. Scores: q · k_j / √${HS} for every position j ≤ ${i}` }), table];
}

// 5. softmax: subtract the max, exponentiate, divide by the sum
function softmaxStep({ i, T, cs, row }) {
  const best = row.weights.indexOf(Math.max(...row.weights));
  const table = el(
    "table",
    {},
    headerRow(["j", "char", "score − max", "exp", "weight"], (col) => (col === 1 ? "l" : "")),
  );
  for (let j = 0; j < T; j++) {
    const masked = j > i;
    table.append(
      el(
        "tr",
        { class: (masked ? "masked" : "") + (j === best ? " top" : "") },
        ...keyCells(j, cs),
        el("td", { text: masked ? "−∞" : fmt(row.scores[j] - row.max) }),
        el("td", { text: fmt(row.exps[j]) }),
        el("td", { class: "w", "data-j": j, text: fmt(row.weights[j]) }),
      ),
    );
  }
  return [
    el("h3", {
      text: `5. Softmax: subtract the largest score (${fmt(row.max)}), exponentiate, divide by the sum`,
    }),
    table,
    line(`sum of exps = ${fmt(row.total)}; each weight = exp / ${fmt(row.total)}`),
  ];
}

// 6. the weighted sum of the values, then through c_proj into the residual stream
function outputStep({ trace, layer, hd, i, T, cs, lt, row }) {
  const off = trace.off.has(headName(layer, hd));
  const table = el(
    "table",
    { class: "output" },
    headerRow(["j", "char", "weight", "× value v_j", "= weight × v_j"], (col) =>
      col > 2 || col === 1 ? "l" : "",
    ),
  );
  for (let j = 0; j <= i; j++) {
    const weighted = new Float64Array(HS);
    for (let d = 0; d < HS; d++) weighted[d] = row.weights[j] * lt.v[headAt(T, hd, j, d)];
    table.append(
      el(
        "tr",
        {},
        ...keyCells(j, cs),
        el("td", { text: fmt(row.weights[j]) }),
        el("td", { class: "l v" }, vec(lt.v, headAt(T, hd, j), HS)),
        el("td", { class: "l v" }, vec(weighted, 0, HS)),
      ),
    );
  }
  return [
    el("h3", {
      text: "6. Output: each value scaled by its weight, summed; then through c_proj into the residual stream",
    }),
    table,
    line("head output = ", vec(row.output, 0, HS)),
    off && trace.mode === "zero"
      ? line(`head ${layer}.${hd} is switched off: c_proj reads 0 in its place, so it adds nothing`)
      : off
        ? line(
            `head ${layer}.${hd} is switched off: c_proj reads its mean output over validation text in its place, so whatever the context it adds `,
            vec(lt.contrib, contribAt(T, hd, i), C),
            " to the residual stream",
          )
        : line(
            `through head ${hd}'s columns of c_proj, it adds `,
            vec(lt.contrib, contribAt(T, hd, i), C),
            " to the residual stream",
          ),
    line(`all ${NH} heads${CFG.bias ? " and c_proj's bias" : ""} together add `, vec(lt.out, rowAt(i), C)),
  ];
}

// 7. the prediction after the last layer
function predictionStep({ trace, i }) {
  return [
    el("h3", {
      text: `7. After all ${CFG.n_layer} layers, ln_f and the LM head: the likeliest next characters`,
    }),
    line(
      topNext(trace.logits, i)
        .map(([id, p]) => `${quoted(VOCAB[id])} ${fmt(p)}`)
        .join("   "),
    ),
  ];
}

// mirrors tinygpt.explain.backward.backward_steps
function backwardSteps({ trace, layer, hd, i, cs }) {
  const title = el("h3", {
    class: "backward",
    text: `Backwards: how the loss at position ${i} reaches head ${layer}.${hd}`,
  });
  const why = backwardUnavailable(trace, i);
  if (why) return [title, el("p", { class: "note", text: why })];
  const b = rowBackward(trace, layer, hd, i);
  const n = i + 1;
  const largest = b.dlogits
    .map((value, id) => [id, value])
    .sort(([, x], [, y]) => Math.abs(y) - Math.abs(x))
    .slice(0, 5);
  const perKey = (labels, cellsOf) => {
    const table = el(
      "table",
      {},
      headerRow(["j", "char", ...labels], (col) => (col === 1 ? "l" : "")),
    );
    for (let j = 0; j < n; j++) table.append(el("tr", {}, ...keyCells(j, cs), ...cellsOf(j)));
    return table;
  };
  const num = (cls, j, value) => el("td", { class: cls, "data-j": j, text: fmt(value) });
  const cell = (node) => el("td", { class: "l" }, node);
  return [
    title,
    el("p", {
      class: "lead",
      text: `The loss of predicting ${quoted(VOCAB[b.target])} after position ${i}: L = −ln p = ${fmt(b.loss)}. Each step passes the gradient one operation further back.`,
    }),
    el("h3", { text: "1. dL/dlogits = softmax − onehot: p − 1 for the target, p for every other character" }),
    line(
      largest.map(([id, value]) => `${quoted(VOCAB[id])} ${value >= 0 ? "+" : ""}${fmt(value)}`).join("   "),
    ),
    el("h3", {
      text: "2. The gradient arriving at this head's output, through c_proj and every later layer",
    }),
    line("g = dL/dy = ", vec(b.g, 0, HS)),
    el("h3", { text: "3. Through the weighted sum y = Σ_j w_j·v_j: dL/dw_j = g · v_j, dL/dv_j = w_j · g" }),
    perKey(["dL/dw_j", "dL/dv_j"], (j) => [num("dw", j, b.dw[j]), cell(vec(b.dv, rowAt(j, 0, HS), HS))]),
    el("h3", {
      text: `4. Through the softmax: dL/ds_j = w_j · (dL/dw_j − Σ_k w_k·dL/dw_k), with Σ_k w_k·dL/dw_k = ${fmt(b.mean)}`,
    }),
    perKey(["w_j × (dL/dw_j − Σ)", "= dL/ds_j"], (j) => [
      el("td", { text: `${fmt(b.w[j])} × (${fmt(b.dw[j])} − ${factor(b.mean)})` }),
      num("ds", j, b.ds[j]),
    ]),
    el("h3", { text: `5. Through the scale 1/√${HS}: dL/d(q·k_j) = dL/ds_j / ${fmt(Math.sqrt(HS))}` }),
    perKey(["dL/d(q·k_j)"], (j) => [num("ddot", j, b.ddot[j])]),
    el("h3", { text: "6. To the query and the keys: dL/dq = Σ_j dL/d(q·k_j)·k_j, dL/dk_j = dL/d(q·k_j)·q" }),
    line("dL/dq = ", vec(b.dq, 0, HS)),
    perKey(["dL/dk_j"], (j) => [cell(vec(b.dk, rowAt(j, 0, HS), HS))]),
    el("h3", {
      text: `7. One plain gradient step of size ${BACKWARD.lr} on head ${hd}'s query, key and value weights, from this loss alone`,
    }),
    el("p", {
      class: "hint",
      text:
        `Training learns by steps like this one: each weight that makes this head's q, k and v moves against its ` +
        `gradient, by ${BACKWARD.lr} times it, and the model runs again. Attention shifts toward the keys whose ` +
        "dL/dw_j is below Σ_k w_k·dL/dw_k (step 4), and a small enough step lowers the loss. Computed in Python when " +
        "the page was written, as explain --backward prints it.",
    }),
    perKey(["weight before", "→ after", "change"], (j) => [
      num("w-before", j, b.w[j]),
      num("w-after", j, b.after[j]),
      el("td", { text: `${b.after[j] >= b.w[j] ? "+" : ""}${fmt(b.after[j] - b.w[j])}` }),
    ]),
    line(`loss ${fmt(b.loss)} → `, el("span", { class: "loss-after", text: fmt(b.lossAfter) })),
  ];
}

export function setupBackward() {
  const button = document.getElementById("backward-toggle");
  const label = () => (state.backward ? "Hide the backward pass" : "Show the backward pass of this row");
  button.textContent = label();
  button.addEventListener("click", () => {
    state.backward = !state.backward;
    button.textContent = label();
    button.setAttribute("aria-pressed", String(state.backward));
    renderArithmetic();
  });
}
