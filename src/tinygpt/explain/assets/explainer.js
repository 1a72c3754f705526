// The tinygpt explainer page: reads the data tinygpt.explain.page inlined, runs the model's forward pass
// (when the weights are embedded) and draws the token strip, the attention grid, the arithmetic of
// one row, the embedding map and the loss curves. All text goes in through textContent.
//
// Short names, each with one meaning throughout:
//   sizes      C n_embd, NH heads, HS head size, V vocabulary, T positions in the prompt
//   indices    t a position, i the query position, j a key position, hd a head, d a dimension of a
//              vector, o an output feature of a linear layer, id a token id
//   offsets    at (and xAt, wAt, from) a flat offset into a row-major array, from rowAt / headAt /
//              weightAt / contribAt below, never written out by hand
//   tensors    x the residual stream (or a layer's input), y a layer's output, w and b its weight and
//              bias, q k v the queries, keys and values, lt the trace of one layer
//   the rest   c a character, cs the prompt's characters, p a probability, e a browser event, n the
//              index of a series' term, lo and hi the two ends of a range, sx and sy a chart's scales
"use strict";

const DATA = JSON.parse(document.getElementById("tinygpt-data").textContent);
const CFG = DATA.config;
const C = CFG.n_embd,
  NH = CFG.n_head,
  HS = CFG.head_size,
  V = CFG.vocab_size;
const VOCAB = DATA.vocab;
const ID = new Map(VOCAB.map((c, id) => [c, id]));
const SHOWN = 8; // entries of a long vector shown before "…"

// ------------------------------------------------------------------ where a number lives

// Every array is flat and row-major, in the layouts tinygpt.explain.trace gives (T positions):
// column `col` of row t of a (rows, width) array: the residual stream and the embeddings (width C),
// c_attn's output (3C), the logits (V), and the rows of a linear layer's weight (its input width)
const rowAt = (t, col = 0, width = C) => t * width + col;
// the column of dimension d of head hd in a C-wide row where the heads sit side by side
const headCol = (hd, d = 0) => hd * HS + d;
// dimension d of position t of head hd in a (NH, T, HS) array: q, k, v and the heads' outputs
const headAt = (T, hd, t, d = 0) => (hd * T + t) * HS + d;
// the weight query i of head hd gives key j, in a (NH, T, T) array
const weightAt = (T, hd, i, j) => (hd * T + i) * T + j;
// feature o of what head hd adds to the residual stream at position t, in a (NH, T, C) array
const contribAt = (T, hd, t, o = 0) => (hd * T + t) * C + o;
// row t of a (rows, width) array, as a view
const rowOf = (arr, t, width) => arr.subarray(rowAt(t, 0, width), rowAt(t + 1, 0, width));

// ------------------------------------------------------------------ numbers and characters

function decode(tensor) {
  const bytes = Uint8Array.from(atob(tensor.b64), (c) => c.charCodeAt(0));
  return new Float32Array(bytes.buffer); // little-endian, as tinygpt.explain.page wrote it
}

const fmt = (value) => (value === -Infinity ? "−∞" : value.toFixed(4));
// a number as a factor of a written-out product: negative ones in brackets
const factor = (value) => (value < 0 ? `(${fmt(value)})` : fmt(value));

function glyph(c) {
  // the same visible symbols as tinygpt.explain.glyphs.glyph
  const named = { "\n": "↵", "\t": "⇥", " ": "·", "\r": "␍", "\x7f": "␡" };
  if (c in named) return named[c];
  const code = c.codePointAt(0);
  if (code < 0x20) return String.fromCodePoint(0x2400 + code);
  if (/^[\p{Mn}\p{Me}]$/u.test(c)) return `◌${c}`;
  if (/^[\p{C}\p{Z}]$/u.test(c)) return "�"; // what Python's isprintable() rejects
  return c;
}

const quoted = (c) => JSON.stringify(c);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";
function svgEl(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== null) node.textContent = text;
  return node;
}

// ------------------------------------------------------------------ the model (live pages)

const W = DATA.weights
  ? Object.fromEntries(Object.entries(DATA.weights).map(([name, tensor]) => [name, decode(tensor)]))
  : null;

// y (T, nOut) = x (T, nIn) · wᵀ + b, with w stored (nOut, nIn) as in torch's Linear
function linear(x, T, nIn, w, b, nOut) {
  const y = new Float64Array(T * nOut);
  for (let t = 0; t < T; t++) {
    for (let o = 0; o < nOut; o++) {
      let sum = b ? b[o] : 0;
      const xAt = rowAt(t, 0, nIn),
        wAt = rowAt(o, 0, nIn);
      for (let d = 0; d < nIn; d++) sum += x[xAt + d] * w[wAt + d];
      y[rowAt(t, o, nOut)] = sum;
    }
  }
  return y;
}

function layerNorm(x, T, w, b) {
  const y = new Float64Array(T * C);
  for (let t = 0; t < T; t++) {
    let mean = 0,
      sumSq = 0;
    for (let d = 0; d < C; d++) mean += x[rowAt(t, d)];
    mean /= C;
    for (let d = 0; d < C; d++) sumSq += (x[rowAt(t, d)] - mean) ** 2;
    const inv = 1 / Math.sqrt(sumSq / C + 1e-5);
    for (let d = 0; d < C; d++) y[rowAt(t, d)] = (x[rowAt(t, d)] - mean) * inv * w[d] + (b ? b[d] : 0);
  }
  return y;
}

// The exact GELU, z·Φ(z) = z·(1 + erf(z/√2))/2, as torch's F.gelu. JavaScript has no erf:
// its Taylor series near 0, and the continued fraction of erfc further out (both to ~1e-15).
function erf(z) {
  const abs = Math.abs(z);
  if (abs < 2.5) {
    let term = abs,
      sum = abs;
    for (let n = 1; Math.abs(term) > 1e-17 * Math.abs(sum); n++) {
      term *= (-abs * abs) / n;
      sum += term / (2 * n + 1);
    }
    return Math.sign(z) * (2 / Math.sqrt(Math.PI)) * sum;
  }
  let fraction = 0; // erfc(z) = exp(-z²)/√π · 1/(z + (1/2)/(z + 1/(z + (3/2)/(z + …))))
  for (let n = 60; n >= 1; n--) fraction = n / 2 / (abs + fraction);
  const erfc = Math.exp(-abs * abs) / Math.sqrt(Math.PI) / (abs + fraction);
  return Math.sign(z) * (1 - erfc);
}
const gelu = (z) => 0.5 * z * (1 + erf(z / Math.SQRT2));

// One prompt through the model: the same trace (layout and names) as tinygpt.explain.trace gives.
function forward(ids) {
  const T = ids.length;
  const param = (name) => W[name] || null;
  // the layer norm or linear layer `name` (its full state_dict name, less .weight and .bias)
  const norm = (name, x) => layerNorm(x, T, param(`${name}.weight`), param(`${name}.bias`));
  const dense = (name, x, nIn, nOut) =>
    linear(x, T, nIn, param(`${name}.weight`), param(`${name}.bias`), nOut);
  const tokEmb = new Float64Array(T * C),
    posEmb = new Float64Array(T * C),
    x = new Float64Array(T * C);
  for (let t = 0; t < T; t++) {
    for (let d = 0; d < C; d++) {
      const at = rowAt(t, d);
      tokEmb[at] = W["wte.weight"][rowAt(ids[t], d)];
      posEmb[at] = W["wpe.weight"][at];
      x[at] = tokEmb[at] + posEmb[at];
    }
  }
  const layers = [];
  for (let layer = 0; layer < CFG.n_layer; layer++) {
    const prefix = `h.${layer}.`;
    const resid = x.slice();
    const ln1 = norm(`${prefix}ln_1`, x);
    const qkv = dense(`${prefix}attn.c_attn`, ln1, C, 3 * C);
    const q = new Float64Array(NH * T * HS),
      k = new Float64Array(NH * T * HS),
      v = new Float64Array(NH * T * HS);
    for (let hd = 0; hd < NH; hd++)
      for (let t = 0; t < T; t++)
        for (let d = 0; d < HS; d++) {
          // a row of c_attn's output is q, k and v side by side, each C wide
          const at = headAt(T, hd, t, d),
            from = rowAt(t, headCol(hd, d), 3 * C);
          q[at] = qkv[from];
          k[at] = qkv[from + C];
          v[at] = qkv[from + 2 * C];
        }
    const weights = new Float64Array(NH * T * T),
      heads = new Float64Array(NH * T * HS);
    for (let hd = 0; hd < NH; hd++)
      for (let i = 0; i < T; i++) {
        const row = rowArithmetic(q, k, v, hd, i, T);
        for (let j = 0; j < T; j++) weights[weightAt(T, hd, i, j)] = row.weights[j];
        for (let d = 0; d < HS; d++) heads[headAt(T, hd, i, d)] = row.output[d];
      }
    const merged = new Float64Array(T * C);
    for (let hd = 0; hd < NH; hd++)
      for (let t = 0; t < T; t++)
        for (let d = 0; d < HS; d++) merged[rowAt(t, headCol(hd, d))] = heads[headAt(T, hd, t, d)];
    const wProj = param(`${prefix}attn.c_proj.weight`);
    const out = dense(`${prefix}attn.c_proj`, merged, C, C);
    const contrib = new Float64Array(NH * T * C);
    for (let hd = 0; hd < NH; hd++)
      for (let t = 0; t < T; t++)
        for (let o = 0; o < C; o++) {
          let sum = 0;
          for (let d = 0; d < HS; d++) sum += heads[headAt(T, hd, t, d)] * wProj[rowAt(o, headCol(hd, d))];
          contrib[contribAt(T, hd, t, o)] = sum;
        }
    for (let at = 0; at < T * C; at++) x[at] += out[at];
    const ln2 = norm(`${prefix}ln_2`, x);
    const fc = dense(`${prefix}mlp.c_fc`, ln2, C, 4 * C).map(gelu);
    const mlp = dense(`${prefix}mlp.c_proj`, fc, 4 * C, C);
    for (let at = 0; at < T * C; at++) x[at] += mlp[at];
    layers.push({ resid, ln_1: ln1, q, k, v, weights, heads, contrib, out });
  }
  const final = norm("ln_f", x);
  const logits = linear(final, T, C, W["wte.weight"], null, V); // the LM head is the token embedding
  return { ids, T, tok_emb: tokEmb, pos_emb: posEmb, layers, logits };
}

function traceFromData(saved) {
  const layers = saved.layers.map((lt) =>
    Object.fromEntries(Object.entries(lt).map(([name, tensor]) => [name, decode(tensor)])),
  );
  return {
    ids: saved.ids,
    T: saved.ids.length,
    tok_emb: decode(saved.tok_emb),
    pos_emb: decode(saved.pos_emb),
    layers,
    logits: decode(saved.logits),
  };
}

// softmax(q·kᵀ/√d)·V for query i of head hd, every intermediate kept
// (as tinygpt.explain.walkthrough.row_arithmetic)
function rowArithmetic(q, k, v, hd, i, T) {
  const scale = Math.sqrt(HS);
  const dots = new Float64Array(T),
    scores = new Float64Array(T).fill(-Infinity);
  let max = -Infinity;
  for (let j = 0; j <= i; j++) {
    let sum = 0;
    for (let d = 0; d < HS; d++) sum += q[headAt(T, hd, i, d)] * k[headAt(T, hd, j, d)];
    dots[j] = sum;
    scores[j] = sum / scale;
    max = Math.max(max, scores[j]);
  }
  const exps = new Float64Array(T);
  let total = 0;
  for (let j = 0; j <= i; j++) {
    exps[j] = Math.exp(scores[j] - max);
    total += exps[j];
  }
  const weights = exps.map((exp) => exp / total);
  const output = new Float64Array(HS);
  for (let j = 0; j <= i; j++) for (let d = 0; d < HS; d++) output[d] += weights[j] * v[headAt(T, hd, j, d)];
  return { dots, scores, max, exps, total, weights, output };
}

function softmax(values) {
  const max = Math.max(...values);
  const exps = Array.from(values, (value) => Math.exp(value - max));
  const total = exps.reduce((sum, exp) => sum + exp, 0);
  return exps.map((exp) => exp / total);
}

function topNext(trace, t, count = 5) {
  const probs = softmax(rowOf(trace.logits, t, V));
  return probs
    .map((p, id) => [id, p])
    .sort(([, pa], [, pb]) => pb - pa)
    .slice(0, Math.min(count, V));
}

// ------------------------------------------------------------------ state

const state = {
  trace: null,
  layer: DATA.selection.layer,
  head: DATA.selection.head,
  token: DATA.selection.token,
};
const chars = () => state.trace.ids.map((id) => VOCAB[id]);

function setTrace(trace) {
  const wasLast = state.trace && state.token === state.trace.T - 1;
  state.trace = trace;
  if (wasLast || state.token >= trace.T) state.token = trace.T - 1;
  renderTokens();
  renderGrid();
  renderArithmetic();
  renderPca();
}

function select(layer, head, token) {
  Object.assign(state, { layer, head, token });
  renderTokens();
  markGrid();
  renderArithmetic();
}

// ------------------------------------------------------------------ header and prompt

function renderAbout() {
  const record = DATA.record;
  const parts = [
    `${DATA.run}/${DATA.checkpoint}`,
    `${DATA.params.toLocaleString("en")} parameters`,
    `${CFG.n_layer} layers × ${NH} heads, n_embd ${C}, d_head ${HS}, block ${CFG.block_size}`,
    `vocabulary of ${V} characters`,
  ];
  if (record.step !== undefined) parts.push(`trained ${record.step.toLocaleString("en")} steps`);
  if (record.best_val_loss !== undefined) parts.push(`best val loss ${record.best_val_loss.toFixed(4)}`);
  document.getElementById("about").textContent = parts.join(" · ");
}

function setupPrompt() {
  const input = document.getElementById("prompt-input");
  const note = document.getElementById("prompt-note");
  if (!W) {
    input.hidden = true;
    note.textContent =
      `This model has ${DATA.params.toLocaleString("en")} parameters, more than the ` +
      `${DATA.live_limit.toLocaleString("en")} this page runs itself: it shows the prompt computed in Python. ` +
      "Run explain.py --html with another --prompt to see another.";
    return;
  }
  input.value = DATA.prompt;
  input.addEventListener("input", () => runPrompt(input.value));
  note.textContent = `Type any text made of the model's ${V} characters; everything below is recomputed in this page.`;
}

function runPrompt(text) {
  const note = document.getElementById("prompt-note");
  let cs = Array.from(text);
  const unknown = [...new Set(cs.filter((c) => !ID.has(c)))];
  note.classList.toggle("warn", unknown.length > 0 || cs.length === 0);
  if (unknown.length) {
    note.textContent = `Not in the model's vocabulary: ${unknown.map(quoted).join(" ")}`;
    return;
  }
  if (!cs.length) {
    note.textContent = "Type at least one character.";
    return;
  }
  note.textContent = "";
  if (cs.length > CFG.block_size) {
    cs = cs.slice(-CFG.block_size);
    note.textContent = `The model reads at most ${CFG.block_size} characters: showing the last ${CFG.block_size}.`;
  }
  setTrace(forward(cs.map((c) => ID.get(c))));
}

function renderTokens() {
  const strip = document.getElementById("tokens");
  strip.replaceChildren();
  chars().forEach((c, t) => {
    const stack = el("div", { class: "col" });
    stack.append(
      el("button", {
        class: `tok${t === state.token ? " picked" : ""}`,
        "data-pos": t,
        title: `position ${t}: ${quoted(c)}`,
        text: glyph(c),
        onclick: () => select(state.layer, state.head, t),
      }),
      el("div", { class: "pos", text: String(t) }),
    );
    for (const [id, p] of topNext(state.trace, t)) {
      const bar = el("div", { class: "bar" });
      bar.style.width = `${(100 * p).toFixed(1)}%`;
      stack.append(
        el(
          "div",
          { class: "guess", title: `${quoted(VOCAB[id])}: ${p.toFixed(4)}` },
          bar,
          el("span", {}, el("span", { class: "ch", text: glyph(VOCAB[id]) }), p.toFixed(2).slice(1)),
        ),
      );
    }
    strip.append(stack);
  });
}

// ------------------------------------------------------------------ the attention grid

// the side of one heatmap cell, in canvas pixels
function cellSize(T) {
  return Math.max(3, Math.min(16, Math.floor(200 / T)));
}

function shadeOf(weight) {
  // white → deep blue
  const white = [247, 251, 255],
    blue = [8, 48, 107];
  return `rgb(${white.map((from, channel) => Math.round(from + (blue[channel] - from) * weight)).join(",")})`;
}

function renderGrid() {
  const { T } = state.trace;
  const cell = cellSize(T);
  const table = el("table");
  const header = el("tr", {}, el("th"));
  for (let hd = 0; hd < NH; hd++) header.append(el("th", { text: `head ${hd}` }));
  table.append(header);
  for (let layer = 0; layer < CFG.n_layer; layer++) {
    const tr = el("tr", {}, el("th", { text: `layer ${layer}` }));
    for (let hd = 0; hd < NH; hd++) {
      const canvas = el("canvas", {
        width: T * cell,
        height: T * cell,
        "data-layer": layer,
        "data-head": hd,
      });
      drawMap(canvas, layer, hd, cell);
      canvas.addEventListener("mousemove", (e) => hover(e, canvas, layer, hd, cell));
      canvas.addEventListener("mouseleave", () => {
        document.getElementById("tooltip").hidden = true;
      });
      canvas.addEventListener("click", (e) => {
        const [i] = cellAt(e, canvas, cell);
        select(layer, hd, i);
      });
      tr.append(el("td", {}, canvas));
    }
    table.append(tr);
  }
  document.getElementById("grid").replaceChildren(table);
  markGrid();
}

function drawMap(canvas, layer, hd, cell) {
  const { T } = state.trace;
  const weights = state.trace.layers[layer].weights;
  const ctx = canvas.getContext("2d");
  for (let i = 0; i < T; i++)
    for (let j = 0; j < T; j++) {
      ctx.fillStyle = j > i ? "#e6e9ef" : shadeOf(weights[weightAt(T, hd, i, j)]);
      ctx.fillRect(j * cell, i * cell, cell, cell);
    }
}

function markGrid() {
  const cell = cellSize(state.trace.T);
  for (const canvas of document.querySelectorAll("#grid canvas")) {
    const layer = +canvas.dataset.layer,
      hd = +canvas.dataset.head;
    const picked = layer === state.layer && hd === state.head;
    const was = canvas.classList.contains("picked");
    canvas.classList.toggle("picked", picked);
    if (was && !picked) drawMap(canvas, layer, hd, cell); // clear the old row mark
    if (picked) {
      drawMap(canvas, layer, hd, cell);
      const ctx = canvas.getContext("2d");
      ctx.strokeStyle = "#e8590c";
      ctx.lineWidth = Math.max(1, cell / 4);
      ctx.strokeRect(0, state.token * cell, canvas.width, cell);
    }
  }
}

// the (query i, key j) cell under the mouse
function cellAt(e, canvas, cell) {
  const rect = canvas.getBoundingClientRect();
  const scale = canvas.width / rect.width;
  const clamp = (t) => Math.max(0, Math.min(state.trace.T - 1, t));
  return [
    clamp(Math.floor(((e.clientY - rect.top) * scale) / cell)),
    clamp(Math.floor(((e.clientX - rect.left) * scale) / cell)),
  ];
}

function hover(e, canvas, layer, hd, cell) {
  const [i, j] = cellAt(e, canvas, cell);
  const cs = chars(),
    T = state.trace.T;
  const tip = document.getElementById("tooltip");
  const what =
    j > i
      ? "masked: a later position"
      : `weight ${fmt(state.trace.layers[layer].weights[weightAt(T, hd, i, j)])}`;
  tip.textContent = `layer ${layer} head ${hd}\nquery ${i} ${quoted(cs[i])} → key ${j} ${quoted(cs[j])}\n${what}`;
  tip.hidden = false;
  tip.style.left = `${e.clientX + 14}px`;
  tip.style.top = `${e.clientY + 14}px`;
}

// ------------------------------------------------------------------ the arithmetic of one row

function vec(arr, start, len, shown = SHOWN) {
  // a vector, its first `shown` entries; a click shows them all
  const all = Array.from(arr.subarray(start, start + len), fmt);
  const short =
    all.length > shown
      ? `[${all.slice(0, shown).join(", ")}, … ${all.length - shown} more]`
      : `[${all.join(", ")}]`;
  const full = `[${all.join(", ")}]`;
  const span = el("span", { class: "vec", title: "click to show every entry", text: short });
  span.addEventListener("click", () => {
    span.textContent = span.textContent === short ? full : short;
  });
  return span;
}

function line(label, ...parts) {
  return el("div", {}, el("span", { class: "eq", text: label }), ...parts);
}

// a table's header row; classOf(col) gives the class of column col
function headerRow(labels, classOf) {
  return el("tr", {}, ...labels.map((label, col) => el("th", { class: classOf(col), text: label })));
}

// the first two cells of a row about key position j: j and its character
function keyCells(j, cs) {
  return [el("td", { text: String(j) }), el("td", { class: "l", text: glyph(cs[j]) })];
}

// The walkthrough of one row: position i through head hd of the selected layer, one function per step.
// Each step gets the same selection `sel` (see renderArithmetic) and returns its nodes.
function renderArithmetic() {
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
    line("q = ", vec(lt.q, at, HS, HS)),
    line("k = ", vec(lt.k, at, HS, HS)),
    line("v = ", vec(lt.v, at, HS, HS)),
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
function outputStep({ hd, i, T, cs, lt, row }) {
  const table = el("table");
  for (let j = 0; j <= i; j++) {
    const weighted = new Float64Array(HS);
    for (let d = 0; d < HS; d++) weighted[d] = row.weights[j] * lt.v[headAt(T, hd, j, d)];
    table.append(
      el(
        "tr",
        {},
        ...keyCells(j, cs),
        el(
          "td",
          { class: "l" },
          `${fmt(row.weights[j])} × `,
          vec(lt.v, headAt(T, hd, j), HS),
          " = ",
          vec(weighted, 0, HS),
        ),
      ),
    );
  }
  return [
    el("h3", {
      text: "6. Output: each value scaled by its weight, summed; then through c_proj into the residual stream",
    }),
    table,
    line("head output = ", vec(row.output, 0, HS, HS)),
    line(
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
      topNext(trace, i)
        .map(([id, p]) => `${quoted(VOCAB[id])} ${fmt(p)}`)
        .join("   "),
    ),
  ];
}

// ------------------------------------------------------------------ embedding map and curves

// the linear map from [min, max] of values onto [lo, hi]
function scaleOf(values, lo, hi) {
  let min = Math.min(...values),
    max = Math.max(...values);
  if (max === min) [min, max] = [min - 1, max + 1];
  return (value) => lo + ((value - min) / (max - min)) * (hi - lo);
}

function renderPca() {
  const svg = document.getElementById("pca");
  const coords = DATA.pca.coords; // each character's coordinates along the two main directions
  const firsts = coords.map(([first]) => first),
    seconds = coords.map(([, second]) => second);
  const sx = scaleOf(firsts, 30, 440),
    sy = scaleOf(seconds, 330, 20);
  const inPrompt = new Set(state.trace ? state.trace.ids : []);
  const share = DATA.pca.share.map((frac) => `${(100 * frac).toFixed(0)}%`);
  const nodes = [
    svgEl("line", { class: "axis", x1: 20, y1: 345, x2: 450, y2: 345 }),
    svgEl("line", { class: "axis", x1: 20, y1: 10, x2: 20, y2: 345 }),
    svgEl(
      "text",
      { class: "tick", x: 450, y: 358, "text-anchor": "end" },
      `1st direction (${share[0]} of variance)`,
    ),
    svgEl(
      "text",
      { class: "tick", x: 14, y: 12, transform: "rotate(-90 14 12)", "text-anchor": "end" },
      `2nd (${share[1]})`,
    ),
  ];
  coords.forEach(([first, second], id) => {
    const label = svgEl(
      "text",
      {
        class: `char${inPrompt.has(id) ? " inprompt" : ""}`,
        x: sx(first).toFixed(1),
        y: sy(second).toFixed(1),
      },
      glyph(VOCAB[id]),
    );
    label.append(svgEl("title", {}, quoted(VOCAB[id])));
    nodes.push(label);
  });
  svg.replaceChildren(...nodes);
}

function renderCurves() {
  const svg = document.getElementById("curves");
  const evals = DATA.metrics; // one entry per evaluation of the run
  if (!evals?.length) {
    svg.style.display = "none";
    document.getElementById("curves-note").textContent =
      DATA.metrics_note || "metrics.jsonl holds no evaluations yet";
    return;
  }
  const steps = evals.map((entry) => entry.step),
    losses = evals.flatMap((entry) => [entry.train_loss, entry.val_loss]);
  const sx = scaleOf(steps, 50, 445),
    sy = scaleOf(losses, 320, 20);
  const path = (key) =>
    evals.map((entry) => `${sx(entry.step).toFixed(1)},${sy(entry[key]).toFixed(1)}`).join(" ");
  const lo = Math.min(...losses),
    hi = Math.max(...losses);
  const last = evals[evals.length - 1];
  const nodes = [
    svgEl("line", { class: "axis", x1: 45, y1: 325, x2: 450, y2: 325 }),
    svgEl("line", { class: "axis", x1: 45, y1: 15, x2: 45, y2: 325 }),
    svgEl("text", { class: "tick", x: 40, y: sy(hi) + 4, "text-anchor": "end" }, hi.toFixed(2)),
    svgEl("text", { class: "tick", x: 40, y: sy(lo) + 4, "text-anchor": "end" }, lo.toFixed(2)),
    svgEl("text", { class: "tick", x: sx(steps[0]), y: 342, "text-anchor": "start" }, String(steps[0])),
    svgEl("text", { class: "tick", x: sx(last.step), y: 342, "text-anchor": "end" }, `step ${last.step}`),
    svgEl("polyline", { class: "train", points: path("train_loss") }),
    svgEl("polyline", { class: "val", points: path("val_loss") }),
    svgEl(
      "text",
      { class: "tick train", x: 440, y: 30, "text-anchor": "end" },
      `train ${last.train_loss.toFixed(3)}`,
    ),
    svgEl(
      "text",
      { class: "tick val", x: 440, y: 46, "text-anchor": "end" },
      `val ${last.val_loss.toFixed(3)}`,
    ),
  ];
  svg.replaceChildren(...nodes);
}

// ------------------------------------------------------------------ start

window.tinygpt = {
  state,
  select,
  setPrompt: (text) => runPrompt(text),
  logits:
    W &&
    ((ids) => {
      const { logits } = forward(ids);
      return Array.from({ length: ids.length }, (_, t) => Array.from(rowOf(logits, t, V)));
    }),
};

renderAbout();
renderCurves();
setupPrompt();
setTrace(W ? forward(Array.from(DATA.prompt, (c) => ID.get(c))) : traceFromData(DATA.trace));
