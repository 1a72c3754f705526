// The explainer page's data (inlined by tinygpt.explain.page, which also joins these modules into the
// page's one script: main.js, after every module it imports) and what every other module uses: the
// model's sizes, where a number lives in a flat array, numbers and characters as text, and elements.
//
// Short names, each with one meaning throughout the modules:
//   sizes      C n_embd, NH heads, HS head size, V vocabulary, T positions in the prompt
//   indices    t a position, i the query position, j a key position, hd a head, d a dimension of a
//              vector, o an output feature of a linear layer, id a token id
//   offsets    at (and xAt, wAt, from) a flat offset into a row-major array, from rowAt / headAt /
//              weightAt / contribAt below, never written out by hand
//   tensors    x the residual stream (or a layer's input), y a layer's output, w and b its weight and
//              bias, q k v the queries, keys and values, lt the trace of one layer
//   the rest   c a character, cs the prompt's characters, p a probability, e a browser event, n the
//              index of a series' term, lo and hi the two ends of a range, sx and sy a chart's scales

// a Web Worker has no document: the page starts it with the data it needs as self.tinygptData (runner.js)
export const DATA = self.document
  ? JSON.parse(document.getElementById("tinygpt-data").textContent)
  : self.tinygptData;
export const CFG = DATA.config;
export const C = CFG.n_embd,
  NH = CFG.n_head,
  HS = CFG.head_size,
  V = CFG.vocab_size;
export const VOCAB = DATA.vocab;
export const ID = new Map(VOCAB.map((c, id) => [c, id]));

// Every array is flat and row-major, in the layouts tinygpt.explain.trace gives (T positions):
// column `col` of row t of a (rows, width) array: the residual stream and the embeddings (width C),
// c_attn's output (3C), the logits (V), and the rows of a linear layer's weight (its input width)
export const rowAt = (t, col = 0, width = C) => t * width + col;
// the column of dimension d of head hd in a C-wide row where the heads sit side by side
export const headCol = (hd, d = 0) => hd * HS + d;
// dimension d of position t of head hd in a (NH, T, hs) array: q, k, v and the heads' outputs
export const headAt = (T, hd, t, d = 0, hs = HS) => (hd * T + t) * hs + d;
// the weight query i of head hd gives key j, in a (NH, T, T) array
export const weightAt = (T, hd, i, j) => (hd * T + i) * T + j;
// feature o of what head hd adds to the residual stream at position t, in a (NH, T, C) array
export const contribAt = (T, hd, t, o = 0) => (hd * T + t) * C + o;
// a share (0 … 1) as a percentage with `digits` decimals
export const percent = (share, digits) => `${(100 * share).toFixed(digits)}%`;
// row t of a (rows, width) array, as a view
export const rowOf = (arr, t, width) => arr.subarray(rowAt(t, 0, width), rowAt(t + 1, 0, width));

// every float16 bit pattern's value, so that decoding one is a look-up (not every browser has a
// Float16Array): sign, 5 bits of exponent (bias 15), 10 of fraction; exponent 0 is subnormal, 31 ∞ or NaN
const HALF = Float32Array.from({ length: 65536 }, (_, bits) => {
  const exponent = (bits >> 10) & 31,
    fraction = bits & 1023;
  let magnitude = (1 + fraction / 1024) * 2 ** (exponent - 15);
  if (exponent === 0) magnitude = (fraction / 1024) * 2 ** -14;
  if (exponent === 31) magnitude = fraction ? NaN : Infinity;
  return bits & 0x8000 ? -magnitude : magnitude;
});

// base64 to bytes: natively where the browser can (Uint8Array.fromBase64, Chromium 140 on), else by atob
function bytesOf(b64) {
  if (Uint8Array.fromBase64) return Uint8Array.fromBase64(b64);
  const text = atob(b64);
  const bytes = new Uint8Array(text.length);
  for (let at = 0; at < text.length; at++) bytes[at] = text.charCodeAt(at);
  return bytes;
}

// mirrors tinygpt.explain.page.tensor_data, backwards: base64 of float32 (or float16) bytes to an array
export function decode(tensor) {
  const bytes = bytesOf(tensor.b64);
  if (tensor.dtype !== "float16") return new Float32Array(bytes.buffer); // little-endian, as Python wrote it
  const halves = new Uint16Array(bytes.buffer),
    values = new Float32Array(halves.length);
  for (let at = 0; at < halves.length; at++) values[at] = HALF[halves[at]];
  return values;
}

// mirrors tinygpt.explain.glyphs.num: 4 decimals; a masked score, −∞, as the symbol
export const fmt = (value) => (value === -Infinity ? "−∞" : value.toFixed(4));
// a number as a factor of a written-out product: negative ones in brackets
export const factor = (value) => (value < 0 ? `(${fmt(value)})` : fmt(value));

// mirrors tinygpt.explain.glyphs.glyph: one visible symbol for a character
export function glyph(c) {
  const named = { "\n": "↵", "\t": "⇥", " ": "·", "\r": "␍", "\x7f": "␡" };
  if (c in named) return named[c];
  const code = c.codePointAt(0);
  if (code < 0x20) return String.fromCodePoint(0x2400 + code);
  if (/^[\p{Mn}\p{Me}]$/u.test(c)) return `◌${c}`;
  if (/^[\p{C}\p{Z}]$/u.test(c)) return "�"; // what Python's isprintable() rejects
  return c;
}

// a character in prose: its glyph in quotes, so a newline reads "↵" here as everywhere on the page
// one that has no glyph of its own (a line separator U+2028, a format character) by its code point
const codePoint = (c) => `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
export const quoted = (c) => (glyph(c) === "�" ? codePoint(c) : `"${glyph(c)}"`);

export function el(tag, attrs = {}, ...children) {
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
export function svgEl(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== null) node.textContent = text;
  return node;
}

// the tooltip beside the mouse, saying `text`
export function showTip(e, text) {
  const tip = document.getElementById("tooltip");
  tip.textContent = text;
  tip.hidden = false;
  tip.style.left = `${e.clientX + 14}px`;
  tip.style.top = `${e.clientY + 14}px`;
}
