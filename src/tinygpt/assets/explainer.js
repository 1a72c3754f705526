// The tinygpt explainer page: reads the data tinygpt.page inlined, runs the model's forward pass
// (when the weights are embedded) and draws the token strip, the attention grid, the arithmetic of
// one row, the embedding map and the loss curves. All text goes in through textContent.
"use strict";

const DATA = JSON.parse(document.getElementById("tinygpt-data").textContent);
const CFG = DATA.config;
const C = CFG.n_embd, NH = CFG.n_head, HS = CFG.head_size, V = CFG.vocab_size;
const VOCAB = DATA.vocab;
const ID = new Map(VOCAB.map((c, i) => [c, i]));
const SHOWN = 8; // entries of a long vector shown before "…"

// ------------------------------------------------------------------ numbers and characters

function decode(t) {
  const bytes = Uint8Array.from(atob(t.b64), (c) => c.charCodeAt(0));
  return new Float32Array(bytes.buffer); // little-endian, as tinygpt.page wrote it
}

const fmt = (x) => (x === -Infinity ? "−∞" : x.toFixed(4));

function glyph(c) {
  // the same visible symbols as tinygpt.display.glyph
  const named = { "\n": "↵", "\t": "⇥", " ": "·", "\r": "␍", "\x7f": "␡" };
  if (c in named) return named[c];
  const code = c.codePointAt(0);
  if (code < 0x20) return String.fromCodePoint(0x2400 + code);
  if (/^[\p{Mn}\p{Me}]$/u.test(c)) return "◌" + c;
  if (/^[\p{C}\p{Z}]$/u.test(c)) return "�"; // what Python's isprintable() rejects
  return c;
}

const quoted = (c) => JSON.stringify(c);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";
function svgEl(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
}

// ------------------------------------------------------------------ the model (live pages)

const W = DATA.weights ? Object.fromEntries(Object.entries(DATA.weights).map(([k, v]) => [k, decode(v)])) : null;

// y (T, nOut) = x (T, nIn) · wᵀ + b, with w stored (nOut, nIn) as in torch's Linear
function linear(x, T, nIn, w, b, nOut) {
  const y = new Float64Array(T * nOut);
  for (let t = 0; t < T; t++) {
    for (let o = 0; o < nOut; o++) {
      let s = b ? b[o] : 0;
      const xo = t * nIn, wo = o * nIn;
      for (let i = 0; i < nIn; i++) s += x[xo + i] * w[wo + i];
      y[t * nOut + o] = s;
    }
  }
  return y;
}

function layerNorm(x, T, w, b) {
  const y = new Float64Array(T * C);
  for (let t = 0; t < T; t++) {
    let mean = 0, v = 0;
    for (let i = 0; i < C; i++) mean += x[t * C + i];
    mean /= C;
    for (let i = 0; i < C; i++) v += (x[t * C + i] - mean) ** 2;
    const inv = 1 / Math.sqrt(v / C + 1e-5);
    for (let i = 0; i < C; i++) y[t * C + i] = (x[t * C + i] - mean) * inv * w[i] + (b ? b[i] : 0);
  }
  return y;
}

// The exact GELU, x·Φ(x) = x·(1 + erf(x/√2))/2, as torch's F.gelu. JavaScript has no erf:
// its Taylor series near 0, and the continued fraction of erfc further out (both to ~1e-15).
function erf(x) {
  const a = Math.abs(x);
  if (a < 2.5) {
    let term = a, sum = a;
    for (let n = 1; Math.abs(term) > 1e-17 * Math.abs(sum); n++) {
      term *= (-a * a) / n;
      sum += term / (2 * n + 1);
    }
    return Math.sign(x) * (2 / Math.sqrt(Math.PI)) * sum;
  }
  let fraction = 0; // erfc(a) = exp(-a²)/√π · 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + …))))
  for (let n = 60; n >= 1; n--) fraction = n / 2 / (a + fraction);
  const erfc = Math.exp(-a * a) / Math.sqrt(Math.PI) / (a + fraction);
  return Math.sign(x) * (1 - erfc);
}
const gelu = (x) => 0.5 * x * (1 + erf(x / Math.SQRT2));

// One prompt through the model: the same trace (layout and names) as tinygpt.trace gives.
function forward(ids) {
  const T = ids.length;
  const p = (name) => W[name] || null;
  const tokEmb = new Float64Array(T * C), posEmb = new Float64Array(T * C), x = new Float64Array(T * C);
  for (let t = 0; t < T; t++) {
    for (let i = 0; i < C; i++) {
      tokEmb[t * C + i] = W["wte.weight"][ids[t] * C + i];
      posEmb[t * C + i] = W["wpe.weight"][t * C + i];
      x[t * C + i] = tokEmb[t * C + i] + posEmb[t * C + i];
    }
  }
  const layers = [];
  for (let l = 0; l < CFG.n_layer; l++) {
    const h = `h.${l}.`;
    const resid = x.slice();
    const ln1 = layerNorm(x, T, p(h + "ln_1.weight"), p(h + "ln_1.bias"));
    const qkv = linear(ln1, T, C, p(h + "attn.c_attn.weight"), p(h + "attn.c_attn.bias"), 3 * C);
    const q = new Float64Array(NH * T * HS), k = new Float64Array(NH * T * HS), v = new Float64Array(NH * T * HS);
    for (let hd = 0; hd < NH; hd++)
      for (let t = 0; t < T; t++)
        for (let d = 0; d < HS; d++) {
          const at = (hd * T + t) * HS + d, from = t * 3 * C + hd * HS + d;
          q[at] = qkv[from];
          k[at] = qkv[from + C];
          v[at] = qkv[from + 2 * C];
        }
    const weights = new Float64Array(NH * T * T), heads = new Float64Array(NH * T * HS);
    for (let hd = 0; hd < NH; hd++)
      for (let i = 0; i < T; i++) {
        const row = rowArithmetic(q, k, v, hd, i, T);
        for (let j = 0; j < T; j++) weights[(hd * T + i) * T + j] = row.weights[j];
        for (let d = 0; d < HS; d++) heads[(hd * T + i) * HS + d] = row.output[d];
      }
    const merged = new Float64Array(T * C);
    for (let hd = 0; hd < NH; hd++)
      for (let t = 0; t < T; t++)
        for (let d = 0; d < HS; d++) merged[t * C + hd * HS + d] = heads[(hd * T + t) * HS + d];
    const wProj = p(h + "attn.c_proj.weight");
    const out = linear(merged, T, C, wProj, p(h + "attn.c_proj.bias"), C);
    const contrib = new Float64Array(NH * T * C);
    for (let hd = 0; hd < NH; hd++)
      for (let t = 0; t < T; t++)
        for (let o = 0; o < C; o++) {
          let s = 0;
          for (let d = 0; d < HS; d++) s += heads[(hd * T + t) * HS + d] * wProj[o * C + hd * HS + d];
          contrib[(hd * T + t) * C + o] = s;
        }
    for (let i = 0; i < T * C; i++) x[i] += out[i];
    const ln2 = layerNorm(x, T, p(h + "ln_2.weight"), p(h + "ln_2.bias"));
    const fc = linear(ln2, T, C, p(h + "mlp.c_fc.weight"), p(h + "mlp.c_fc.bias"), 4 * C).map(gelu);
    const mlp = linear(fc, T, 4 * C, p(h + "mlp.c_proj.weight"), p(h + "mlp.c_proj.bias"), C);
    for (let i = 0; i < T * C; i++) x[i] += mlp[i];
    layers.push({ resid, ln_1: ln1, q, k, v, weights, heads, contrib, out });
  }
  const final = layerNorm(x, T, p("ln_f.weight"), p("ln_f.bias"));
  const logits = linear(final, T, C, W["wte.weight"], null, V); // the LM head is the token embedding
  return { ids, T, tok_emb: tokEmb, pos_emb: posEmb, layers, logits };
}

function traceFromData(t) {
  const layers = t.layers.map((l) => Object.fromEntries(Object.entries(l).map(([k, v]) => [k, decode(v)])));
  return { ids: t.ids, T: t.ids.length, tok_emb: decode(t.tok_emb), pos_emb: decode(t.pos_emb), layers, logits: decode(t.logits) };
}

// softmax(q·kᵀ/√d)·V for query i of head hd, every intermediate kept (as tinygpt.explain.row_arithmetic)
function rowArithmetic(q, k, v, hd, i, T) {
  const qi = (hd * T + i) * HS, scale = Math.sqrt(HS);
  const dots = new Float64Array(T), scores = new Float64Array(T).fill(-Infinity);
  let max = -Infinity;
  for (let j = 0; j <= i; j++) {
    let s = 0;
    for (let d = 0; d < HS; d++) s += q[qi + d] * k[(hd * T + j) * HS + d];
    dots[j] = s;
    scores[j] = s / scale;
    max = Math.max(max, scores[j]);
  }
  const exps = new Float64Array(T);
  let total = 0;
  for (let j = 0; j <= i; j++) total += exps[j] = Math.exp(scores[j] - max);
  const weights = exps.map((e) => e / total);
  const output = new Float64Array(HS);
  for (let j = 0; j <= i; j++) for (let d = 0; d < HS; d++) output[d] += weights[j] * v[(hd * T + j) * HS + d];
  return { dots, scores, max, exps, total, weights, output };
}

function softmax(logits, t) {
  const row = logits.subarray(t * V, (t + 1) * V);
  const max = Math.max(...row);
  const exps = Array.from(row, (x) => Math.exp(x - max));
  const total = exps.reduce((a, b) => a + b, 0);
  return exps.map((e) => e / total);
}

function topNext(trace, t, n = 5) {
  const probs = softmax(trace.logits, t);
  return probs.map((p, id) => [id, p]).sort((a, b) => b[1] - a[1]).slice(0, Math.min(n, V));
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
  const r = DATA.record;
  const parts = [
    `${DATA.run}/${DATA.checkpoint}`,
    `${DATA.params.toLocaleString("en")} parameters`,
    `${CFG.n_layer} layers × ${NH} heads, n_embd ${C}, d_head ${HS}, block ${CFG.block_size}`,
    `vocabulary of ${V} characters`,
  ];
  if (r.step !== undefined) parts.push(`trained ${r.step.toLocaleString("en")} steps`);
  if (r.best_val_loss !== undefined) parts.push(`best val loss ${r.best_val_loss.toFixed(4)}`);
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
    const col = el("div", { class: "col" });
    col.append(
      el("button", {
        class: "tok" + (t === state.token ? " picked" : ""),
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
      col.append(
        el("div", { class: "guess", title: `${quoted(VOCAB[id])}: ${p.toFixed(4)}` },
          bar, el("span", {}, el("span", { class: "ch", text: glyph(VOCAB[id]) }), p.toFixed(2).slice(1))),
      );
    }
    strip.append(col);
  });
}

// ------------------------------------------------------------------ the attention grid

function cellSize(T) {
  return Math.max(3, Math.min(16, Math.floor(200 / T)));
}

function shadeOf(w) {
  // white → deep blue
  const a = [247, 251, 255], b = [8, 48, 107];
  return `rgb(${a.map((x, i) => Math.round(x + (b[i] - x) * w)).join(",")})`;
}

function renderGrid() {
  const { T } = state.trace;
  const cs = cellSize(T);
  const table = el("table");
  const head = el("tr", {}, el("th"));
  for (let hd = 0; hd < NH; hd++) head.append(el("th", { text: `head ${hd}` }));
  table.append(head);
  for (let l = 0; l < CFG.n_layer; l++) {
    const row = el("tr", {}, el("th", { text: `layer ${l}` }));
    for (let hd = 0; hd < NH; hd++) {
      const canvas = el("canvas", { width: T * cs, height: T * cs, "data-layer": l, "data-head": hd });
      drawMap(canvas, l, hd, cs);
      canvas.addEventListener("mousemove", (e) => hover(e, canvas, l, hd, cs));
      canvas.addEventListener("mouseleave", () => (document.getElementById("tooltip").hidden = true));
      canvas.addEventListener("click", (e) => {
        const [i] = cellAt(e, canvas, cs);
        select(l, hd, i);
      });
      row.append(el("td", {}, canvas));
    }
    table.append(row);
  }
  document.getElementById("grid").replaceChildren(table);
  markGrid();
}

function drawMap(canvas, l, hd, cs) {
  const { T } = state.trace;
  const w = state.trace.layers[l].weights;
  const ctx = canvas.getContext("2d");
  for (let i = 0; i < T; i++)
    for (let j = 0; j < T; j++) {
      ctx.fillStyle = j > i ? "#e6e9ef" : shadeOf(w[(hd * T + i) * T + j]);
      ctx.fillRect(j * cs, i * cs, cs, cs);
    }
}

function markGrid() {
  const cs = cellSize(state.trace.T);
  for (const canvas of document.querySelectorAll("#grid canvas")) {
    const l = +canvas.dataset.layer, hd = +canvas.dataset.head;
    const picked = l === state.layer && hd === state.head;
    const was = canvas.classList.contains("picked");
    canvas.classList.toggle("picked", picked);
    if (was && !picked) drawMap(canvas, l, hd, cs); // clear the old row mark
    if (picked) {
      drawMap(canvas, l, hd, cs);
      const ctx = canvas.getContext("2d");
      ctx.strokeStyle = "#e8590c";
      ctx.lineWidth = Math.max(1, cs / 4);
      ctx.strokeRect(0, state.token * cs, canvas.width, cs);
    }
  }
}

function cellAt(e, canvas, cs) {
  const box = canvas.getBoundingClientRect();
  const scale = canvas.width / box.width;
  const clamp = (x) => Math.max(0, Math.min(state.trace.T - 1, x));
  return [clamp(Math.floor(((e.clientY - box.top) * scale) / cs)), clamp(Math.floor(((e.clientX - box.left) * scale) / cs))];
}

function hover(e, canvas, l, hd, cs) {
  const [i, j] = cellAt(e, canvas, cs);
  const cs_ = chars(), T = state.trace.T;
  const tip = document.getElementById("tooltip");
  const what = j > i ? "masked: a later position" : `weight ${fmt(state.trace.layers[l].weights[(hd * T + i) * T + j])}`;
  tip.textContent = `layer ${l} head ${hd}\nquery ${i} ${quoted(cs_[i])} → key ${j} ${quoted(cs_[j])}\n${what}`;
  tip.hidden = false;
  tip.style.left = `${e.clientX + 14}px`;
  tip.style.top = `${e.clientY + 14}px`;
}

// ------------------------------------------------------------------ the arithmetic of one row

function vec(arr, start, len, shown = SHOWN) {
  // a vector, its first `shown` entries; a click shows them all
  const all = Array.from(arr.subarray(start, start + len), fmt);
  const short = all.length > shown ? `[${all.slice(0, shown).join(", ")}, … ${all.length - shown} more]` : `[${all.join(", ")}]`;
  const full = `[${all.join(", ")}]`;
  const span = el("span", { class: "vec", title: "click to show every entry", text: short });
  span.addEventListener("click", () => (span.textContent = span.textContent === short ? full : short));
  return span;
}

function line(label, ...parts) {
  return el("div", {}, el("span", { class: "eq", text: label }), ...parts);
}

function renderArithmetic() {
  const { trace, layer: l, head: hd, token: i } = state;
  const T = trace.T, cs = chars(), lt = trace.layers[l];
  const box = document.getElementById("arith");
  const c = cs[i];
  const parts = [
    el("p", { class: "lead", text: `Position ${i}, ${quoted(c)}, through layer ${l}, head ${hd}. Every number is the model's own.` }),
  ];
  // 1. embedding
  const sum = new Float64Array(C);
  for (let d = 0; d < C; d++) sum[d] = trace.tok_emb[i * C + d] + trace.pos_emb[i * C + d];
  parts.push(
    el("h3", { text: "1. Embedding: token embedding + position embedding" }),
    line(`wte[${quoted(c)}] = `, vec(trace.tok_emb, i * C, C)),
    line(`wpe[${i}] = `, vec(trace.pos_emb, i * C, C)),
    line("x = wte + wpe = ", vec(sum, 0, C)),
  );
  if (l > 0) {
    const earlier = l === 1 ? "layer 0" : `layers 0…${l - 1}`;
    parts.push(line(`x entering layer ${l}, after ${earlier} added attention and MLP outputs = `, vec(lt.resid, i * C, C)));
  }
  // 2. layer norm
  let mean = 0, v = 0;
  for (let d = 0; d < C; d++) mean += lt.resid[i * C + d];
  mean /= C;
  for (let d = 0; d < C; d++) v += (lt.resid[i * C + d] - mean) ** 2;
  parts.push(
    el("h3", { text: `2. Layer norm ln_1: (x − mean) / √(var + 1e-5) · weight${CFG.bias ? " + bias" : ""}` }),
    line(`mean = ${fmt(mean)}, var = ${fmt(v / C)}; ln_1(x) = `, vec(lt.ln_1, i * C, C)),
  );
  // 3. q, k, v
  const at = (hd * T + i) * HS;
  parts.push(
    el("h3", { text: `3. Query, key and value of head ${hd} (${HS} dimensions each)` }),
    line("q = ", vec(lt.q, at, HS, HS)),
    line("k = ", vec(lt.k, at, HS, HS)),
    line("v = ", vec(lt.v, at, HS, HS)),
  );
  // 4. scores
  const a = rowArithmetic(lt.q, lt.k, lt.v, hd, i, T);
  const scores = el("table", {}, el("tr", {}, ...["j", "char", `q · k_j (first terms)`, "= q · k_j", `/ √${HS}`].map((h, n) => el("th", { class: n < 3 ? "l" : "", text: h }))));
  for (let j = 0; j < T; j++) {
    const masked = j > i;
    const terms = [];
    for (let d = 0; d < Math.min(3, HS); d++) {
      const s = (x) => (x < 0 ? `(${fmt(x)})` : fmt(x));
      terms.push(`${s(lt.q[at + d])}×${s(lt.k[(hd * T + j) * HS + d])}`);
    }
    const written = masked ? "masked: a later position" : terms.join(" + ") + (HS > 3 ? ` + … (${HS} terms)` : "");
    scores.append(el("tr", { class: masked ? "masked" : "" },
      el("td", { text: String(j) }), el("td", { class: "l", text: glyph(cs[j]) }), el("td", { class: "l", text: written }),
      el("td", { text: masked ? "" : fmt(a.dots[j]) }), el("td", { class: "s", text: fmt(a.scores[j]) })));
  }
  parts.push(el("h3", { text: `4. Scores: q · k_j / √${HS} for every position j ≤ ${i}` }), scores);
  // 5. softmax
  const best = a.weights.indexOf(Math.max(...a.weights));
  const soft = el("table", {}, el("tr", {}, ...["j", "char", "score − max", "exp", "weight"].map((h, n) => el("th", { class: n === 1 ? "l" : "", text: h }))));
  for (let j = 0; j < T; j++) {
    const masked = j > i;
    soft.append(el("tr", { class: (masked ? "masked" : "") + (j === best ? " top" : "") },
      el("td", { text: String(j) }), el("td", { class: "l", text: glyph(cs[j]) }),
      el("td", { text: masked ? "−∞" : fmt(a.scores[j] - a.max) }), el("td", { text: fmt(a.exps[j]) }),
      el("td", { class: "w", "data-j": j, text: fmt(a.weights[j]) })));
  }
  parts.push(
    el("h3", { text: `5. Softmax: subtract the largest score (${fmt(a.max)}), exponentiate, divide by the sum` }),
    soft,
    line(`sum of exps = ${fmt(a.total)}; each weight = exp / ${fmt(a.total)}`),
  );
  // 6. weighted sum of values, then into the residual stream
  const rows = el("table");
  for (let j = 0; j <= i; j++) {
    const weighted = new Float64Array(HS);
    for (let d = 0; d < HS; d++) weighted[d] = a.weights[j] * lt.v[(hd * T + j) * HS + d];
    rows.append(el("tr", {}, el("td", { text: String(j) }), el("td", { class: "l", text: glyph(cs[j]) }),
      el("td", { class: "l" }, `${fmt(a.weights[j])} × `, vec(lt.v, (hd * T + j) * HS, HS), " = ", vec(weighted, 0, HS))));
  }
  parts.push(
    el("h3", { text: "6. Output: each value scaled by its weight, summed; then through c_proj into the residual stream" }),
    rows,
    line("head output = ", vec(a.output, 0, HS, HS)),
    line(`through head ${hd}'s columns of c_proj, it adds `, vec(lt.contrib, (hd * T + i) * C, C), " to the residual stream"),
    line(`all ${NH} heads${CFG.bias ? " and c_proj's bias" : ""} together add `, vec(lt.out, i * C, C)),
  );
  // 7. prediction
  parts.push(
    el("h3", { text: `7. After all ${CFG.n_layer} layers, ln_f and the LM head: the likeliest next characters` }),
    line(topNext(trace, i).map(([id, p]) => `${quoted(VOCAB[id])} ${fmt(p)}`).join("   ")),
  );
  box.replaceChildren(...parts);
}

// ------------------------------------------------------------------ embedding map and curves

function scaleOf(values, lo, hi) {
  let min = Math.min(...values), max = Math.max(...values);
  if (max === min) [min, max] = [min - 1, max + 1];
  return (x) => lo + ((x - min) / (max - min)) * (hi - lo);
}

function renderPca() {
  const svg = document.getElementById("pca");
  const coords = DATA.pca.coords;
  const sx = scaleOf(coords.map((p) => p[0]), 30, 440), sy = scaleOf(coords.map((p) => p[1]), 330, 20);
  const inPrompt = new Set(state.trace ? state.trace.ids : []);
  const share = DATA.pca.share.map((s) => `${(100 * s).toFixed(0)}%`);
  const nodes = [
    svgEl("line", { class: "axis", x1: 20, y1: 345, x2: 450, y2: 345 }),
    svgEl("line", { class: "axis", x1: 20, y1: 10, x2: 20, y2: 345 }),
    svgEl("text", { class: "tick", x: 450, y: 358, "text-anchor": "end" }, `1st direction (${share[0]} of variance)`),
    svgEl("text", { class: "tick", x: 14, y: 12, transform: "rotate(-90 14 12)", "text-anchor": "end" }, `2nd (${share[1]})`),
  ];
  coords.forEach(([x, y], id) => {
    const label = svgEl("text", { class: "char" + (inPrompt.has(id) ? " inprompt" : ""), x: sx(x).toFixed(1), y: sy(y).toFixed(1) }, glyph(VOCAB[id]));
    label.append(svgEl("title", {}, quoted(VOCAB[id])));
    nodes.push(label);
  });
  svg.replaceChildren(...nodes);
}

function renderCurves() {
  const svg = document.getElementById("curves");
  const rows = DATA.metrics;
  if (!rows || !rows.length) {
    svg.style.display = "none";
    document.getElementById("curves-note").textContent = DATA.metrics_note || "metrics.jsonl holds no evaluations yet";
    return;
  }
  const steps = rows.map((r) => r.step), losses = rows.flatMap((r) => [r.train_loss, r.val_loss]);
  const sx = scaleOf(steps, 50, 445), sy = scaleOf(losses, 320, 20);
  const path = (key) => rows.map((r) => `${sx(r.step).toFixed(1)},${sy(r[key]).toFixed(1)}`).join(" ");
  const lo = Math.min(...losses), hi = Math.max(...losses);
  const nodes = [
    svgEl("line", { class: "axis", x1: 45, y1: 325, x2: 450, y2: 325 }),
    svgEl("line", { class: "axis", x1: 45, y1: 15, x2: 45, y2: 325 }),
    svgEl("text", { class: "tick", x: 40, y: sy(hi) + 4, "text-anchor": "end" }, hi.toFixed(2)),
    svgEl("text", { class: "tick", x: 40, y: sy(lo) + 4, "text-anchor": "end" }, lo.toFixed(2)),
    svgEl("text", { class: "tick", x: sx(steps[0]), y: 342, "text-anchor": "start" }, String(steps[0])),
    svgEl("text", { class: "tick", x: sx(steps[steps.length - 1]), y: 342, "text-anchor": "end" }, `step ${steps[steps.length - 1]}`),
    svgEl("polyline", { class: "train", points: path("train_loss") }),
    svgEl("polyline", { class: "val", points: path("val_loss") }),
    svgEl("text", { class: "tick train", x: 440, y: 30, "text-anchor": "end" }, `train ${rows[rows.length - 1].train_loss.toFixed(3)}`),
    svgEl("text", { class: "tick val", x: 440, y: 46, "text-anchor": "end" }, `val ${rows[rows.length - 1].val_loss.toFixed(3)}`),
  ];
  svg.replaceChildren(...nodes);
}

// ------------------------------------------------------------------ start

window.tinygpt = {
  state,
  select,
  setPrompt: (text) => runPrompt(text),
  logits: W && ((ids) => {
    const { logits } = forward(ids);
    return Array.from({ length: ids.length }, (_, t) => Array.from(logits.subarray(t * V, (t + 1) * V)));
  }),
};

renderAbout();
renderCurves();
setupPrompt();
setTrace(W ? forward(Array.from(DATA.prompt, (c) => ID.get(c))) : traceFromData(DATA.trace));
