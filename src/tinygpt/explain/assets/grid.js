// The grid of attention heatmaps, layer × head: each labelled with its head's role (a click switches
// the head off), hover for a weight, click a row to follow it; and the zero / mean ablation switch.

import { CFG, DATA, el, fmt, glyph, NH, quoted, showTip, weightAt } from "./base.js";
import { headName, MEANS, W } from "./model.js";
import { allHeadsOn, chars, select, setMode, state, toggleHead } from "./state.js";

const CARD = 16; // what a card adds around its map: padding and borders, in pixels
const GAP = 8; // between two cards (the CSS of #grid .heads)

// the side of one heatmap cell, in canvas pixels: a layer's maps share the grid's width, from 3 to 40
// pixels a cell (the CSS shrinks a map whose cells would not fit at 3)
function cellSize(T) {
  const width = document.getElementById("grid").clientWidth;
  const perMap = (width - (NH - 1) * GAP) / NH - CARD;
  return Math.max(3, Math.min(40, Math.floor((perMap - axisOf(40).margin) / T)));
}

// the axis labels around a heatmap: their font size, the margin they take, and every how many positions
// one is written (all of them when the cells are large enough to hold a character)
function axisOf(cell) {
  const font = Math.max(9, Math.min(16, cell));
  return { font, margin: font + 4, every: Math.ceil(font / cell) };
}

// mirrors tinygpt.training.attention_image, for one weight: the same dark blue at 1, but off-white at 0
export const rgbOf = (weight) =>
  [247, 251, 255].map((from, channel) => Math.round(from + ([8, 48, 107][channel] - from) * weight));
export const shadeOf = (weight) => `rgb(${rgbOf(weight).join(",")})`;
const MASKED = [230, 233, 239]; // #e6e9ef, the masked future

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

export function renderGrid() {
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
        "data-font": axisOf(cell).font,
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
export function setupModeSwitch() {
  const why = !W
    ? "This page shows one prompt computed in Python, so it cannot switch heads off."
    : !MEANS
      ? `Mean ablation is not available: ${DATA.means_note}.`
      : "";
  for (const input of document.querySelectorAll("#ablation-mode input")) {
    input.disabled = !W || (input.value === "mean" && !MEANS);
    input.checked = input.value === state.mode;
    input.addEventListener("change", () => setMode(input.value));
  }
  document.getElementById("ablation-mode-note").textContent = why;
}

// the cell × cell square at (top, left) of an ImageData, in an opaque colour [r, g, b]
function fillCell(image, top, left, cell, [r, g, b]) {
  const { data, width } = image;
  for (let y = top; y < top + cell; y++)
    for (let at = (y * width + left) * 4, x = 0; x < cell; x++, at += 4) {
      data[at] = r;
      data[at + 1] = g;
      data[at + 2] = b;
      data[at + 3] = 255;
    }
}

// mirrors tinygpt.explain.heatmap.heatmap, on a canvas: row i where query i looks, grey the masked future
// The cells are written as pixels, one putImageData a map: the same pixels as a fillRect a cell, which
// took most of the time of drawing the grid at 64 positions (36 maps of 4,096 cells)
function drawMap(canvas, layer, hd, cell) {
  const { T } = state.trace;
  const weights = state.trace.layers[layer].weights;
  const { font, margin, every } = axisOf(cell);
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const side = T * cell,
    image = ctx.createImageData(side, side);
  for (let i = 0; i < T; i++)
    for (let j = 0; j < T; j++) {
      fillCell(image, i * cell, j * cell, cell, j > i ? MASKED : rgbOf(weights[weightAt(T, hd, i, j)]));
    }
  ctx.putImageData(image, margin, margin);
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

export function markGrid() {
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
