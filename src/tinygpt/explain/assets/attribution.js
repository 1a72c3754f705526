// Direct logit attribution (tinygpt.explain.attribution) of the selected position: the logit of the
// character the model predicts there, split into what each part of the residual stream wrote, each
// through ln_f with its scale at that position held fixed. Computed here from the page's own forward pass
// (its embeddings, each head's output through c_proj, each MLP's output, the final stream), so it follows
// a typed prompt and heads switched off. main.js draws it with renderAttribution; nothing here draws on
// import.
//
// Short names: p a part (C numbers), read γ·W_U[c] (what a normalised part meets), sigma ln_f's scale.
import { C, contribAt, DATA, el, fmt, NH, quoted, rowOf, V, VOCAB } from "./base.js";
import { headName, W } from "./model.js";
import { chars, state } from "./state.js";

const LN_EPS = 1e-5; // tinygpt.model.LayerNorm's epsilon

// the mean of a C-wide row
function meanOf(p) {
  let sum = 0;
  for (let d = 0; d < C; d++) sum += p[d];
  return sum / C;
}

// the parts of the stream at position t, in the order the model computes them: [name, row (C,)] pairs
function streamParts(trace, t) {
  const parts = [
    ["embed", rowOf(trace.tok_emb, t, C)],
    ["pos_embed", rowOf(trace.pos_emb, t, C)],
  ];
  trace.layers.forEach((lt, layer) => {
    for (let hd = 0; hd < NH; hd++) {
      const at = contribAt(trace.T, hd, t);
      parts.push([headName(layer, hd), lt.contrib.subarray(at, at + C)]);
    }
    const bias = W[`h.${layer}.attn.c_proj.bias`];
    if (bias) parts.push([`attn bias ${layer}`, bias]);
    if (lt.mlp) parts.push([`mlp ${layer}`, rowOf(lt.mlp, t, C)]);
  });
  return parts;
}

// mirrors tinygpt.explain.attribution.logit_parts (no --target, no --versus: the predicted character)
// The logit of the character predicted after position t of the trace, and its parts by name: each part p
// adds (p − mean(p))/σ·γ·W_U[c], σ = √(var(x) + 1e-5) of the final stream x at t; ln_f's bias adds β·W_U[c].
export function logitParts(trace, t) {
  const row = rowOf(trace.logits, t, V);
  let target = 0;
  for (let id = 1; id < V; id++) if (row[id] > row[target]) target = id;
  const unembed = rowOf(W["wte.weight"], target, C); // the LM head is the token embedding
  const gamma = W["ln_f.weight"],
    beta = W["ln_f.bias"];
  const x = rowOf(trace.stream, t, C);
  const mean = meanOf(x);
  let sumSq = 0;
  for (let d = 0; d < C; d++) sumSq += (x[d] - mean) ** 2;
  const sigma = Math.sqrt(sumSq / C + LN_EPS);
  const through = (p) => {
    const centre = meanOf(p);
    let sum = 0;
    for (let d = 0; d < C; d++) sum += (p[d] - centre) * gamma[d] * unembed[d];
    return sum / sigma;
  };
  const parts = streamParts(trace, t).map(([name, p]) => [name, through(p)]);
  if (beta) {
    let sum = 0;
    for (let d = 0; d < C; d++) sum += beta[d] * unembed[d];
    parts.push(["ln_f bias", sum]);
  }
  const total = parts.reduce((acc, [, value]) => acc + value, 0);
  return {
    position: t,
    target: VOCAB[target],
    logit: row[target],
    sum: total,
    parts: Object.fromEntries(parts),
  };
}

// one bar: the part's name, its value, and a bar left (negative) or right (positive) of the axis
function partRow(name, value, top) {
  const bar = el("span", { class: value < 0 ? "neg" : "pos" });
  bar.style.width = `${((50 * Math.abs(value)) / top).toFixed(2)}%`;
  return el(
    "div",
    { class: "part", "data-part": name, "data-value": String(value) },
    el("span", { class: "name", text: name }),
    el("span", { class: "num", text: `${value >= 0 ? "+" : ""}${fmt(value)}` }),
    el("span", { class: "axis" }, bar),
  );
}

// the section: the selected position's parts, largest first, and their sum beside the model's logit
export function renderAttribution() {
  const box = document.getElementById("attribution");
  if (!W) {
    box.replaceChildren(
      el("p", {
        class: "note",
        text:
          "The page computes attribution from its own forward pass, which it runs for models up to " +
          `${DATA.live_limit.toLocaleString("en")} parameters only: run inspect --attribution for this one.`,
      }),
    );
    return;
  }
  const t = state.token;
  const found = logitParts(state.trace, t);
  const ordered = Object.entries(found.parts).sort(([, a], [, b]) => b - a);
  const top = Math.max(...ordered.map(([, value]) => Math.abs(value))) || 1;
  const off = state.off.size ? ` (switched off: ${[...state.off].sort().join(", ")})` : "";
  box.replaceChildren(
    el("p", {
      class: "lead",
      text:
        `After position ${t}, ${quoted(chars()[t])}, the model predicts ${quoted(found.target)}${off}: ` +
        `its logit ${fmt(found.logit)}; the parts add up to ${fmt(found.sum)}.`,
    }),
    el(
      "div",
      { class: "parts", "data-target": found.target },
      ...ordered.map(([n, v]) => partRow(n, v, top)),
    ),
  );
  box.dataset.logit = String(found.logit);
  box.dataset.sum = String(found.sum);
}
