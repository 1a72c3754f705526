// The model's forward pass, run in the page on the weights it carries (pages of models up to
// tinygpt.explain.page.LIVE_LIMIT parameters), in float64, with any heads switched off: on the page's
// thread, or for a large model in a Web Worker (runner.js starts it; worker.js is its script).

import {
  C,
  CFG,
  contribAt,
  DATA,
  decode,
  HS,
  headAt,
  headCol,
  NH,
  rowAt,
  rowOf,
  V,
  weightAt,
} from "./base.js";

// the weights by state_dict name, or null where the page carries none (a worker is handed them: setWeights)
export let W = DATA.weights ? lazyWeights(DATA.weights) : null;
export function setWeights(tensors) {
  W = lazyWeights(tensors);
}

// tensors in base64 (tinygpt.explain.page.tensor_data) as arrays, each decoded when first read: where a
// Web Worker runs the model, the page's thread reads a few small ones (attribution.js) and decodes no more
function lazyWeights(tensors) {
  const weights = {};
  for (const [name, tensor] of Object.entries(tensors)) {
    let array = null;
    Object.defineProperty(weights, name, { enumerable: true, get: () => (array ??= decode(tensor)) });
  }
  return weights;
}

// The kernel of linear() and projection(), nearly all of a large model's pass: for t < T and o < nOut,
// y[yAt + t·yRow + o] = Σ x[xAt + t·xRow + d] · w[wAt + o·wRow + d] over d < n, summed in order of d. It
// fills y in blocks of 4 positions × 2 outputs: each number read from x or w serves two or four products
// (about twice the speed of one dot product at a time), the 4 positions' rows of x copied side by side
// first, so that the loop reads them from one place. Where T or nOut runs out, a block repeats its last
// row or output: computed twice, written once.
function products(y, x, w, n, T, nOut, [xAt, xRow], [wAt, wRow], [yAt, yRow]) {
  const wOf = (o) => wAt + Math.min(o, nOut - 1) * wRow;
  const xs = new Float64Array(4 * n); // x[t + r, d] at 4d + r
  for (let t = 0; t < T; t += 4) {
    for (let r = 0; r < 4; r++)
      for (let d = 0, from = xAt + Math.min(t + r, T - 1) * xRow; d < n; d++) xs[4 * d + r] = x[from + d];
    for (let o = 0; o < nOut; o += 2) {
      const w0 = wOf(o),
        w1 = wOf(o + 1);
      // sRK: the sum for position t + R and output o + K
      let s00 = 0,
        s10 = 0,
        s20 = 0,
        s30 = 0,
        s01 = 0,
        s11 = 0,
        s21 = 0,
        s31 = 0;
      for (let d = 0, at = 0; d < n; d++, at += 4) {
        const w0d = w[w0 + d],
          w1d = w[w1 + d];
        const x0d = xs[at],
          x1d = xs[at + 1],
          x2d = xs[at + 2],
          x3d = xs[at + 3];
        s00 += x0d * w0d;
        s10 += x1d * w0d;
        s20 += x2d * w0d;
        s30 += x3d * w0d;
        s01 += x0d * w1d;
        s11 += x1d * w1d;
        s21 += x2d * w1d;
        s31 += x3d * w1d;
      }
      const put = (r, k, sum) => {
        if (t + r < T && o + k < nOut) y[yAt + (t + r) * yRow + o + k] = sum;
      };
      put(0, 0, s00);
      put(1, 0, s10);
      put(2, 0, s20);
      put(3, 0, s30);
      put(0, 1, s01);
      put(1, 1, s11);
      put(2, 1, s21);
      put(3, 1, s31);
    }
  }
}

// mirrors torch.nn.Linear: y (T, nOut) = x (T, nIn) · wᵀ + b, with w stored (nOut, nIn)
function linear(x, T, nIn, w, b, nOut) {
  const y = new Float64Array(T * nOut);
  products(y, x, w, nIn, T, nOut, [0, nIn], [0, nIn], [0, nOut]);
  if (b) for (let at = 0; at < T * nOut; at++) y[at] += b[at % nOut];
  return y;
}

// mirrors tinygpt.model.LayerNorm: (x − mean) / √(var + 1e-5) · w + b, over each row's C entries
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

// mirrors math.erf (JavaScript has none): its Taylor series near 0, and the continued fraction of erfc
// further out (both to ~1e-15)
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
// mirrors torch.nn.functional.gelu, the exact GELU: z·Φ(z) = z·(1 + erf(z/√2))/2
const gelu = (z) => 0.5 * z * (1 + erf(z / Math.SQRT2));

// "L.H", the name of head H of layer L, as --ablate writes it
export const headName = (layer, hd) => `${layer}.${hd}`;

// each layer's mean head outputs over validation text, (n_layer, C), as --ablate-mode mean uses them
// (tinygpt.explain.ablate.validation_means, computed in Python when the page was written), or null
export const MEANS = DATA.means && decode(DATA.means);

// attention's output projection, c_proj, of what it reads (T, C), split by head: contrib (NH, T, C), each
// head's columns of c_proj times what it reads there, and out (T, C), their sum and the bias
function projection(merged, T, w, b) {
  const contrib = new Float64Array(NH * T * C),
    out = new Float64Array(T * C);
  // head hd's contribution: its HS columns of merged (T, C) times its HS columns of c_proj's rows (C, C)
  for (let hd = 0; hd < NH; hd++)
    products(contrib, merged, w, HS, T, C, [headCol(hd), C], [headCol(hd), C], [contribAt(T, hd, 0), C]);
  for (let t = 0; t < T; t++)
    for (let o = 0; o < C; o++) {
      let sum = b ? b[o] : 0;
      for (let hd = 0; hd < NH; hd++) sum += contrib[contribAt(T, hd, t, o)];
      out[rowAt(t, o)] = sum;
    }
  return { out, contrib };
}

// mirrors tinygpt.explain.trace.trace_prompt, with tinygpt.explain.ablate.ablated and tinygpt.explain.lens.logit_lens
// One prompt through the model: the same trace (layout and names) as tinygpt.explain.trace gives, with
// the heads named in `off` switched off as tinygpt.explain.ablate does (their slice of c_proj's input replaced:
// by 0 in mode "zero", by their mean output in mode "mean") and the logit lens: lens[layer] (T, V), the
// logits if the model ended after that layer.
export function forward(ids, off = new Set(), mode = "zero") {
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
    const { out, contrib } = projection(
      merged,
      T,
      param(`${prefix}attn.c_proj.weight`),
      param(`${prefix}attn.c_proj.bias`),
    );
    for (let at = 0; at < T * C; at++) x[at] += out[at];
    let mlp = null; // an attention-only model (model.mlp: false) has none
    if (CFG.mlp !== false) {
      const fc = dense(`${prefix}mlp.c_fc`, norm(`${prefix}ln_2`, x), C, 4 * C).map(gelu);
      mlp = dense(`${prefix}mlp.c_proj`, fc, 4 * C, C);
      for (let at = 0; at < T * C; at++) x[at] += mlp[at];
    }
    layers.push({ resid, ln_1: ln1, q, k, v, weights, heads, contrib, out, mlp });
    lens.push(lmHead(x));
  }
  const logits = lens[lens.length - 1];
  // stream: the residual stream that reaches ln_f (T, C), which attribution.js splits into its parts
  return { ids, T, tok_emb: tokEmb, pos_emb: posEmb, layers, lens, logits, stream: x, off, mode };
}

// mirrors tinygpt.explain.page.trace_data, backwards: the trace Python computed for the page's prompt, for
// larger models
export function traceFromData(saved) {
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

// mirrors tinygpt.explain.walkthrough.row_arithmetic (the formula of tinygpt.attention.attention)
// softmax(q·kᵀ/√d)·V for query i of head hd (hs dimensions), every intermediate kept
export function rowArithmetic(q, k, v, hd, i, T, hs = HS) {
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

// mirrors tinygpt.attention.stable_softmax: subtract the max, exponentiate, divide by the sum
export function softmax(values) {
  const max = Math.max(...values);
  const exps = Array.from(values, (value) => Math.exp(value - max));
  const total = exps.reduce((sum, exp) => sum + exp, 0);
  return exps.map((exp) => exp / total);
}

// mirrors tinygpt.explain.heatmap.top_next
// the `count` likeliest next characters after position t from logits (T, V): [id, p] pairs
export function topNext(logits, t, count = 5) {
  const probs = softmax(rowOf(logits, t, V));
  return probs
    .map((p, id) => [id, p])
    .sort(([, pa], [, pb]) => pb - pa)
    .slice(0, Math.min(count, V));
}
