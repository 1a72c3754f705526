// The tinygpt explainer page: reads the data tinygpt.explain.page inlined, runs the model's forward pass
// (when the weights are embedded, with any heads switched off, their output replaced by 0 or by their
// mean) and draws the worked example, the token strip with the logit lens, the attention grid labelled
// with each head's role, the arithmetic of one row forwards and backwards (steps 1–7), the embedding
// map and the loss curves. All text goes in through textContent.
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
const SHOWN = 8; // a vector this long or shorter is written out whole; a longer one is a colour strip
const LARGEST = 3; // the terms of a long vector written out beside its strip

// ------------------------------------------------------------------ where a number lives

// Every array is flat and row-major, in the layouts tinygpt.explain.trace gives (T positions):
// column `col` of row t of a (rows, width) array: the residual stream and the embeddings (width C),
// c_attn's output (3C), the logits (V), and the rows of a linear layer's weight (its input width)
const rowAt = (t, col = 0, width = C) => t * width + col;
// the column of dimension d of head hd in a C-wide row where the heads sit side by side
const headCol = (hd, d = 0) => hd * HS + d;
// dimension d of position t of head hd in a (NH, T, hs) array: q, k, v and the heads' outputs
const headAt = (T, hd, t, d = 0, hs = HS) => (hd * T + t) * hs + d;
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

// a character in prose: its glyph in quotes, so a newline reads "↵" here as everywhere on the page
const quoted = (c) => `"${glyph(c)}"`;

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

// "L.H", the name of head H of layer L, as --ablate writes it
const headName = (layer, hd) => `${layer}.${hd}`;

// each layer's mean head outputs over validation text, (n_layer, C), as --ablate-mode mean uses them
// (tinygpt.ablate.validation_means, computed in Python when the page was written), or null
const MEANS = DATA.means && decode(DATA.means);

// One prompt through the model: the same trace (layout and names) as tinygpt.explain.trace gives, with
// the heads named in `off` switched off as tinygpt.ablate does (their slice of c_proj's input replaced:
// by 0 in mode "zero", by their mean output in mode "mean") and the logit lens: lens[layer] (T, V), the
// logits if the model ended after that layer.
function forward(ids, off = new Set(), mode = "zero") {
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
  const layers = [],
    lens = [];
  const lmHead = (stream) => linear(norm("ln_f", stream), T, C, W["wte.weight"], null, V); // tied to wte
  for (let layer = 0; layer < CFG.n_layer; layer++) {
    const prefix = `h.${layer}.`;
    const on = (hd) => !off.has(headName(layer, hd));
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
    // what c_proj reads: the heads side by side, a switched-off head's columns 0 or its mean output
    const merged = new Float64Array(T * C);
    for (let hd = 0; hd < NH; hd++)
      for (let t = 0; t < T; t++)
        for (let d = 0; d < HS; d++) {
          const col = headCol(hd, d);
          if (on(hd)) merged[rowAt(t, col)] = heads[headAt(T, hd, t, d)];
          else if (mode === "mean") merged[rowAt(t, col)] = MEANS[rowAt(layer, col)];
        }
    const wProj = param(`${prefix}attn.c_proj.weight`);
    const out = dense(`${prefix}attn.c_proj`, merged, C, C);
    const contrib = new Float64Array(NH * T * C); // each head's columns of c_proj times what it reads there
    for (let hd = 0; hd < NH; hd++)
      for (let t = 0; t < T; t++)
        for (let o = 0; o < C; o++) {
          let sum = 0;
          for (let d = 0; d < HS; d++)
            sum += merged[rowAt(t, headCol(hd, d))] * wProj[rowAt(o, headCol(hd, d))];
          contrib[contribAt(T, hd, t, o)] = sum;
        }
    for (let at = 0; at < T * C; at++) x[at] += out[at];
    const ln2 = norm(`${prefix}ln_2`, x);
    const fc = dense(`${prefix}mlp.c_fc`, ln2, C, 4 * C).map(gelu);
    const mlp = dense(`${prefix}mlp.c_proj`, fc, 4 * C, C);
    for (let at = 0; at < T * C; at++) x[at] += mlp[at];
    layers.push({ resid, ln_1: ln1, q, k, v, weights, heads, contrib, out });
    lens.push(lmHead(x));
  }
  return { ids, T, tok_emb: tokEmb, pos_emb: posEmb, layers, lens, logits: lens[lens.length - 1], off, mode };
}

function traceFromData(saved) {
  const layers = saved.layers.map((lt) =>
    Object.fromEntries(Object.entries(lt).map(([name, tensor]) => [name, decode(tensor)])),
  );
  const lens = decode(saved.lens); // (n_layer, T, V)
  const T = saved.ids.length;
  return {
    ids: saved.ids,
    T,
    tok_emb: decode(saved.tok_emb),
    pos_emb: decode(saved.pos_emb),
    layers,
    lens: layers.map((_, layer) => lens.subarray(layer * T * V, (layer + 1) * T * V)),
    logits: decode(saved.logits),
    off: new Set(),
    mode: "zero",
  };
}

// softmax(q·kᵀ/√d)·V for query i of head hd (hs dimensions), every intermediate kept
// (as tinygpt.explain.walkthrough.row_arithmetic)
function rowArithmetic(q, k, v, hd, i, T, hs = HS) {
  const headAt_ = (t, d) => headAt(T, hd, t, d, hs);
  const scale = Math.sqrt(hs);
  const dots = new Float64Array(T),
    scores = new Float64Array(T).fill(-Infinity);
  let max = -Infinity;
  for (let j = 0; j <= i; j++) {
    let sum = 0;
    for (let d = 0; d < hs; d++) sum += q[headAt_(i, d)] * k[headAt_(j, d)];
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
  const output = new Float64Array(hs);
  for (let j = 0; j <= i; j++) for (let d = 0; d < hs; d++) output[d] += weights[j] * v[headAt_(j, d)];
  return { dots, scores, max, exps, total, weights, output };
}

function softmax(values) {
  const max = Math.max(...values);
  const exps = Array.from(values, (value) => Math.exp(value - max));
  const total = exps.reduce((sum, exp) => sum + exp, 0);
  return exps.map((exp) => exp / total);
}

// the `count` likeliest next characters after position t from logits (T, V): [id, p] pairs
function topNext(logits, t, count = 5) {
  const probs = softmax(rowOf(logits, t, V));
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
  off: new Set(), // the heads switched off, by headName
  mode: "zero", // what a switched-off head outputs: "zero" or "mean" (tinygpt.ablate.MODES)
  backward: false, // the backward panel is open
};
const chars = () => state.trace.ids.map((id) => VOCAB[id]);

function setTrace(trace) {
  const wasLast = state.trace && state.token === state.trace.T - 1;
  state.trace = trace;
  if (wasLast || state.token >= trace.T) state.token = trace.T - 1;
  document.getElementById("tooltip").hidden = true; // it spoke of the maps just replaced
  renderTokens();
  renderGrid();
  renderArithmetic();
  renderPca();
}

// a click on a head's label: switch it off, or back on, and run the model again
function toggleHead(layer, hd) {
  const name = headName(layer, hd);
  if (state.off.has(name)) state.off.delete(name);
  else state.off.add(name);
  setTrace(forward(state.trace.ids, state.off, state.mode));
}

function allHeadsOn() {
  state.off.clear();
  setTrace(forward(state.trace.ids, state.off, state.mode));
}

// the mode switch: a switched-off head outputs 0, or its mean output over validation text
function setMode(mode) {
  state.mode = mode;
  document.querySelector(`#ablation-mode input[value="${mode}"]`).checked = true;
  setTrace(forward(state.trace.ids, state.off, state.mode));
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
  document.getElementById("roles-note").textContent = DATA.roles_note || "";
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
  setTrace(
    forward(
      cs.map((c) => ID.get(c)),
      state.off,
      state.mode,
    ),
  );
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
    for (const [id, p] of topNext(state.trace.logits, t)) {
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
    stack.append(lensRows(t));
    strip.append(stack);
  });
}

// the logit lens under position t: per layer, the five characters it would predict, shaded by probability
function lensRows(t) {
  const box = el("div", { class: "lens" });
  state.trace.lens.forEach((logits, layer) => {
    const top = topNext(logits, t);
    const row = el("div", {
      class: "lens-row",
      "data-layer": layer,
      title: `if the model ended after layer ${layer}: ${top.map(([id, p]) => `${quoted(VOCAB[id])} ${p.toFixed(4)}`).join(", ")}`,
    });
    row.append(el("span", { class: "ln", text: `L${layer}` }));
    for (const [id, p] of top) {
      const c = el("span", { class: "lc", "data-p": p.toFixed(6), text: glyph(VOCAB[id]) });
      c.style.background = `rgba(31, 95, 191, ${Math.min(1, p).toFixed(3)})`;
      if (p > 0.5) c.style.color = "#fff";
      row.append(c);
    }
    box.append(row);
  });
  return box;
}

// ------------------------------------------------------------------ the attention grid

// the side of one heatmap cell, in canvas pixels
function cellSize(T) {
  return Math.max(3, Math.min(16, Math.floor(200 / T)));
}

// the axis labels around a heatmap: their font size, the margin they take, and every how many positions
// one is written (all of them when the cells are large enough to hold a character)
function axisOf(cell) {
  const font = Math.max(8, Math.min(12, cell));
  return { font, margin: font + 4, every: Math.ceil(font / cell) };
}

function shadeOf(weight) {
  // white → deep blue
  const white = [247, 251, 255],
    blue = [8, 48, 107];
  return `rgb(${white.map((from, channel) => Math.round(from + (blue[channel] - from) * weight)).join(",")})`;
}

// the role of head hd of layer `layer` as inspect --heads computed it, or null
function roleOf(layer, hd) {
  return DATA.roles ? DATA.roles.find((r) => r.layer === layer && r.head === hd) : null;
}

// the clickable label of a head: its role and score; a click switches the head off or back on
function roleButton(layer, hd) {
  const role = roleOf(layer, hd);
  const off = state.off.has(headName(layer, hd));
  const named = role ? role.label : "no role";
  const score = role && role.label !== "mixed" ? ` ${role.scores[role.label].toFixed(2)}` : "";
  const scores = role
    ? Object.entries(role.scores)
        .map(([name, value]) => `${name} ${value.toFixed(3)}`)
        .join(", ")
    : DATA.roles_note;
  const action = !W
    ? "This page shows one prompt computed in Python, so it cannot switch heads off."
    : off
      ? "Switched off. Click to switch it back on."
      : `Click to switch this head off (its output replaced by ${MODE_WORDS[state.mode].by}) and run the model again.`;
  const button = el("button", {
    class: `role${off ? " off" : ""}`,
    "data-layer": layer,
    "data-head": hd,
    title: `${role ? `${named}: ${DATA.role_words[named]}. ` : ""}Scores: ${scores}. ${action}`,
    text: off ? `off · ${named}` : named + score,
    onclick: () => toggleHead(layer, hd),
  });
  if (!W) button.disabled = true;
  return button;
}

function renderGrid() {
  const { T } = state.trace;
  const cell = cellSize(T);
  const { margin } = axisOf(cell);
  const grid = document.getElementById("grid");
  grid.style.setProperty("--map", `${margin + T * cell}px`);
  const rows = [];
  for (let layer = 0; layer < CFG.n_layer; layer++) {
    const cards = el("div", { class: "heads" });
    for (let hd = 0; hd < NH; hd++) {
      const canvas = el("canvas", {
        width: margin + T * cell,
        height: margin + T * cell,
        "data-layer": layer,
        "data-head": hd,
        "data-cell": cell,
        "data-margin": margin,
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
      const off = state.off.has(headName(layer, hd));
      cards.append(
        el(
          "figure",
          { class: `card${off ? " off" : ""}`, "data-layer": layer, "data-head": hd },
          el(
            "figcaption",
            {},
            el("span", { class: "name", text: `head ${layer}.${hd}` }),
            roleButton(layer, hd),
          ),
          canvas,
        ),
      );
    }
    rows.push(el("div", { class: "layer" }, el("h3", { text: `layer ${layer}` }), cards));
  }
  grid.replaceChildren(...rows);
  renderAblationNote();
  markGrid();
}

// what a switched-off head outputs in each mode, in words
const MODE_WORDS = {
  zero: {
    by: "0",
    note: "zero ablation: the head's output is replaced by 0 before c_proj, as --ablate does",
  },
  mean: {
    by: "its mean output over validation text",
    note:
      "mean ablation: the head's output is replaced by its mean over the run's validation text before " +
      "c_proj, as --ablate-mode mean does, so only what it does for this context is lost",
  },
};

function renderAblationNote() {
  const note = document.getElementById("ablation-note");
  if (!state.off.size) {
    note.replaceChildren();
    return;
  }
  const names = [...state.off].sort().join(", ");
  note.replaceChildren(
    `Switched off: ${names}. Every prediction, heatmap and number on this page is now computed without `,
    state.off.size === 1 ? "it " : "them ",
    `(${MODE_WORDS[state.mode].note}). `,
    el("button", { class: "all-on", text: "switch every head back on", onclick: allHeadsOn }),
  );
}

// the zero / mean switch beside the ablation note; mean needs the means Python computed
function setupModeSwitch() {
  const why = !W
    ? "This page shows one prompt computed in Python, so it cannot switch heads off."
    : !MEANS
      ? `Mean ablation is not available: ${DATA.means_note}.`
      : "";
  for (const input of document.querySelectorAll("#ablation-mode input")) {
    input.disabled = !W || (input.value === "mean" && !MEANS);
    input.addEventListener("change", () => setMode(input.value));
  }
  document.getElementById("ablation-mode-note").textContent = why;
}

function drawMap(canvas, layer, hd, cell) {
  const { T } = state.trace;
  const weights = state.trace.layers[layer].weights;
  const { font, margin, every } = axisOf(cell);
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  for (let i = 0; i < T; i++)
    for (let j = 0; j < T; j++) {
      ctx.fillStyle = j > i ? "#e6e9ef" : shadeOf(weights[weightAt(T, hd, i, j)]);
      ctx.fillRect(margin + j * cell, margin + i * cell, cell, cell);
    }
  // the axes: keys j along the top, queries i down the left, each labelled with its character
  const cs = chars();
  ctx.fillStyle = "#5d6677";
  ctx.font = `${font}px ui-monospace, "DejaVu Sans Mono", monospace`;
  ctx.textAlign = "center";
  ctx.textBaseline = "middle";
  for (let t = 0; t < T; t += every) {
    const at = margin + (t + 0.5) * cell;
    ctx.fillText(glyph(cs[t]), at, margin / 2);
    ctx.fillText(glyph(cs[t]), margin / 2, at);
  }
}

function markGrid() {
  const cell = cellSize(state.trace.T);
  const { margin } = axisOf(cell);
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
      ctx.strokeRect(margin, margin + state.token * cell, canvas.width - margin, cell);
    }
  }
}

// the (query i, key j) cell under the mouse (the nearest one, over the axis labels)
function cellAt(e, canvas, cell) {
  const rect = canvas.getBoundingClientRect();
  const scale = canvas.width / rect.width;
  const { margin } = axisOf(cell);
  const clamp = (t) => Math.max(0, Math.min(state.trace.T - 1, t));
  return [
    clamp(Math.floor(((e.clientY - rect.top) * scale - margin) / cell)),
    clamp(Math.floor(((e.clientX - rect.left) * scale - margin) / cell)),
  ];
}

function hover(e, canvas, layer, hd, cell) {
  const [i, j] = cellAt(e, canvas, cell);
  const cs = chars(),
    T = state.trace.T;
  const what =
    j > i
      ? "masked: a later position"
      : `weight ${fmt(state.trace.layers[layer].weights[weightAt(T, hd, i, j)])}`;
  showTip(e, `layer ${layer} head ${hd}\nquery ${i} ${quoted(cs[i])} → key ${j} ${quoted(cs[j])}\n${what}`);
}

function showTip(e, text) {
  const tip = document.getElementById("tooltip");
  tip.textContent = text;
  tip.hidden = false;
  tip.style.left = `${e.clientX + 14}px`;
  tip.style.top = `${e.clientY + 14}px`;
}

// ------------------------------------------------------------------ the arithmetic of one row

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

// ------------------------------------------------------------------ the backward pass of one row

// computed in Python when the page was written, for its prompt (tinygpt.explain.page.backward_data and
// step_data), each (T − 1, n_layer, NH, width) for the loss at position i and head hd of `layer`:
//   g          the gradient reaching the head's output (width HS; backward.head_output_gradients)
//   after      step 7: row i's weights after one plain gradient step of size lr on the head's q, k, v
//              rows of c_attn (width T, zero beyond key i; backward.step_effects)
//   lossAfter  step 7: the loss at i after that step (width 1)
const BACKWARD = {
  ids: DATA.backward.ids,
  g: decode(DATA.backward.g),
  lr: DATA.backward.step.lr,
  after: decode(DATA.backward.step.after),
  lossAfter: decode(DATA.backward.step.loss_after),
};
const gradAt = (i, layer, hd, d = 0, width = HS) => ((i * CFG.n_layer + layer) * NH + hd) * width + d;

// why the backward panel cannot follow position i of this trace back, or null when it can
function backwardUnavailable(trace, i) {
  if (trace.off.size) return "The backward pass is shown with every head on: switch them back on to see it.";
  const same = trace.ids.length === BACKWARD.ids.length && trace.ids.every((id, t) => id === BACKWARD.ids[t]);
  if (!same)
    return (
      "The gradient reaching each head comes from Python, computed when the page was written for its prompt " +
      `${JSON.stringify(DATA.prompt)}: type that prompt again to see it, or write the page with another --prompt.`
    );
  if (i >= trace.T - 1)
    return `Position ${i} is the last: the character after it is not in the prompt, so there is no loss to follow back. Click an earlier character.`;
  return null;
}

// steps 1–7 of tinygpt.explain.backward for the loss L of predicting the character after position i
// (n = i + 1 keys): every gradient from the page's own forward pass and the g Python computed, and
// step 7's weights and loss after the step, as Python computed them
function rowBackward(trace, layer, hd, i) {
  const T = trace.T,
    lt = trace.layers[layer],
    n = i + 1;
  const row = rowArithmetic(lt.q, lt.k, lt.v, hd, i, T);
  const target = trace.ids[i + 1];
  const probs = softmax(rowOf(trace.logits, i, V));
  const dlogits = probs.map((p, id) => p - (id === target ? 1 : 0)); // softmax − onehot
  const g = BACKWARD.g.subarray(gradAt(i, layer, hd), gradAt(i, layer, hd, HS)); // dL/dy
  const w = row.weights.subarray(0, n);
  const dw = new Float64Array(n), // dL/dw_j = g · v_j
    dv = new Float64Array(n * HS); // dL/dv_j = w_j · g, row j of (n, HS)
  for (let j = 0; j < n; j++)
    for (let d = 0; d < HS; d++) {
      dw[j] += g[d] * lt.v[headAt(T, hd, j, d)];
      dv[rowAt(j, d, HS)] = w[j] * g[d];
    }
  const mean = w.reduce((sum, wj, j) => sum + wj * dw[j], 0); // Σ_k w_k · dL/dw_k
  const ds = w.map((wj, j) => wj * (dw[j] - mean)); // through the softmax
  const ddot = ds.map((value) => value / Math.sqrt(HS)); // through the scale
  const dq = new Float64Array(HS),
    dk = new Float64Array(n * HS);
  for (let j = 0; j < n; j++)
    for (let d = 0; d < HS; d++) {
      dq[d] += ddot[j] * lt.k[headAt(T, hd, j, d)];
      dk[rowAt(j, d, HS)] = ddot[j] * lt.q[headAt(T, hd, i, d)];
    }
  const after = BACKWARD.after.subarray(gradAt(i, layer, hd, 0, T), gradAt(i, layer, hd, n, T)); // T: its prompt's
  const lossAfter = BACKWARD.lossAfter[gradAt(i, layer, hd, 0, 1)];
  return {
    target,
    loss: -Math.log(probs[target]),
    dlogits,
    g,
    w,
    dw,
    dv,
    mean,
    ds,
    ddot,
    dq,
    dk,
    after,
    lossAfter,
  };
}

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

function setupBackward() {
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

// ------------------------------------------------------------------ the worked example

// attention.py's worked example: one query, three keys and values of 2 dimensions
const EXAMPLE = {
  q: [1.0, 0.5],
  keys: [
    [1.0, 0.0],
    [0.5, 1.0],
    [1.5, 1.0],
  ],
  values: [
    [0.5, 1.0],
    [1.0, 0.0],
    [1.5, 1.0],
  ],
};

// the example through rowArithmetic, the very function the model's rows go through: the query is the
// last of 3 positions, so it sees all three keys
function renderExample() {
  const { q, keys, values } = EXAMPLE;
  const T = keys.length,
    hs = q.length;
  const qs = new Float64Array(T * hs);
  qs.set(q, (T - 1) * hs);
  const row = rowArithmetic(
    qs,
    Float64Array.from(keys.flat()),
    Float64Array.from(values.flat()),
    0,
    T - 1,
    T,
    hs,
  );
  const pair = (xs) => `[${xs.map((x) => x.toFixed(1)).join(", ")}]`;
  const table = el(
    "table",
    {},
    headerRow(
      ["j", "key k_j", "value v_j", "1. q · k_j", `2. ÷ √${hs}`, "3. weight", "4. weight × v_j"],
      () => "",
    ),
  );
  keys.forEach((k, j) => {
    const weighted = values[j].map((x) => fmt(row.weights[j] * x)).join(", ");
    table.append(
      el(
        "tr",
        {},
        el("td", { text: String(j) }),
        el("td", { text: pair(k) }),
        el("td", { text: pair(values[j]) }),
        el("td", { text: `${q[0]}×${k[0]} + ${q[1]}×${k[1]} = ${fmt(row.dots[j])}` }),
        el("td", { text: fmt(row.scores[j]) }),
        el("td", { class: "w", text: fmt(row.weights[j]) }),
        el("td", { text: `[${weighted}]` }),
      ),
    );
  });
  document
    .getElementById("example")
    .replaceChildren(
      line(`q = ${pair(q)}, d = ${hs}`),
      table,
      line(
        `softmax: exp(score − ${fmt(row.max)}) / ${fmt(row.total)}; output = the sum of the last column = `,
        el("span", { id: "example-output", text: `[${Array.from(row.output, fmt).join(", ")}]` }),
      ),
    );
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

// rows of a (T, V) array as nested lists
const rowsOf = (arr, T) => Array.from({ length: T }, (_, t) => Array.from(rowOf(arr, t, V)));

window.tinygpt = {
  state,
  select,
  toggleHead,
  setPrompt: (text) => runPrompt(text),
  // the logits (T, V) of ids with the heads named in `off` ("L.H") switched off, in mode "zero" or "mean"
  logits:
    W && ((ids, off = [], mode = "zero") => rowsOf(forward(ids, new Set(off), mode).logits, ids.length)),
  // the logit lens of ids: (n_layer, T, V)
  lens: W && ((ids) => forward(ids).lens.map((logits) => rowsOf(logits, ids.length))),
  // the backward panel's numbers for position i of the shown prompt through head hd of `layer`
  backward: (layer, hd, i) => {
    const why = backwardUnavailable(state.trace, i);
    if (why) throw new Error(why);
    const b = rowBackward(state.trace, layer, hd, i);
    return Object.fromEntries(
      Object.entries(b).map(([name, value]) => [name, typeof value === "number" ? value : Array.from(value)]),
    );
  },
};

renderAbout();
renderExample();
renderCurves();
setupPrompt();
setupModeSwitch();
setupBackward();
setTrace(W ? forward(Array.from(DATA.prompt, (c) => ID.get(c))) : traceFromData(DATA.trace));
