// The map of the character embeddings (PCA, computed in Python) and the run's loss curves.

import { DATA, glyph, quoted, svgEl, VOCAB } from "./base.js";
import { state } from "./state.js";

// the linear map from [min, max] of values onto [lo, hi]
export function scaleOf(values, lo, hi) {
  let min = Math.min(...values),
    max = Math.max(...values);
  if (max === min) [min, max] = [min - 1, max + 1];
  return (value) => lo + ((value - min) / (max - min)) * (hi - lo);
}

// where each label goes: on its point, or where that would cover a label placed before, at the nearest
// free spot on a spiral around it, inside the map's box [xLo, yLo, xHi, yHi]; sizes[n] is label n's
// [width, height] as drawn (a wide emoji takes more than a letter)
function labelSpots(points, sizes, [xLo, yLo, xHi, yHi]) {
  const placed = []; // [x, y, width, height] of each label placed so far
  const free = (x, y, [w, h]) =>
    placed.every(([px, py, pw, ph]) => Math.abs(px - x) >= (w + pw) / 2 || Math.abs(py - y) >= (h + ph) / 2);
  const inside = (x, y) => x >= xLo && x <= xHi && y >= yLo && y <= yHi;
  return points.map(([x, y], n) => {
    let spot = [x, y];
    for (let k = 1; !(free(...spot, sizes[n]) && inside(...spot)) && k < 3000; k++) {
      const r = 0.6 * Math.sqrt(k) * sizes[n][1];
      spot = [x + r * Math.cos(k * 2.4), y + r * Math.sin(k * 2.4)];
    }
    placed.push([...spot, ...sizes[n]]);
    return spot;
  });
}

export function renderPca() {
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
  const points = coords.map(([first, second]) => [sx(first), sy(second)]);
  const labels = points.map(([x, y], id) => {
    const where = { class: `char${inPrompt.has(id) ? " inprompt" : ""}`, x: x.toFixed(1), y: y.toFixed(1) };
    const label = svgEl("text", where, glyph(VOCAB[id]));
    label.append(svgEl("title", {}, quoted(VOCAB[id])));
    return label;
  });
  svg.replaceChildren(...nodes, ...labels); // drawn once at their points, to measure each label
  const sizes = labels.map((label) => {
    const box = label.getBBox();
    return [box.width + 1, box.height];
  });
  labelSpots(points, sizes, [25, 12, 445, 335]).forEach(([lx, ly], id) => {
    const [x, y] = points[id];
    if (lx === x && ly === y) return;
    labels[id].setAttribute("x", lx.toFixed(1));
    labels[id].setAttribute("y", ly.toFixed(1));
    const leader = {
      class: "leader",
      x1: x.toFixed(1),
      y1: y.toFixed(1),
      x2: lx.toFixed(1),
      y2: ly.toFixed(1),
    };
    svg.insertBefore(svgEl("line", leader), labels[0]); // moved so as not to cover another: a line to its point
  });
}

export function renderCurves() {
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
