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
