// The timeline of training (tinygpt.explain.timeline): a slider over the run's snapshots and, at the step
// it points to, the loss curves with a marker, every head's attention on the probe with its role label
// at that step, each role's scores over time (a line per head), the top-5 predictions along the probe
// and the sample. main.js draws it with renderTimeline; nothing here draws on import. Its names share
// one script with the other modules' (tinygpt.explain.page joins them), so they are distinct from theirs.
//
// Short names: s a snapshot, k the index of the shown snapshot, L a layer, hd a head, i a probe position
// (a query), j a key position, P the probe's length, sx and sy a chart's scales.

import { DATA, el, glyph, svgEl } from "./base.js";
import { scaleOf } from "./charts.js";
import { shadeOf } from "./grid.js";

const TIMELINE = DATA.timeline; // {snapshots, thresholds, roles}, or null: no timeline.jsonl beside the checkpoint
const SNAPS = TIMELINE ? TIMELINE.snapshots : [];
const STEPS = SNAPS.map((s) => s.step);
const CELL = 6; // pixels per heatmap cell
const AXIS = { font: 10, margin: 12, every: 2 }; // the probe's characters along a map's axes, every 2nd
const timelineView = { k: SNAPS.length - 1 };

const headColor = (L, hd) => `hsl(${(L * 360) / DATA.config.n_layer + hd * 23}, 65%, ${35 + 12 * (hd % 3)}%)`;

// mirrors tinygpt.explain.roles.label: the role with the highest score of those that clear their
// thresholds, else "mixed" (ties go to the first, in the order of TIMELINE.roles, as max does in Python)
function roleLabel(scores) {
  const cleared = TIMELINE.roles.filter((role) => scores[role] >= TIMELINE.thresholds[role]);
  return cleared.length ? cleared.reduce((a, b) => (scores[b] > scores[a] ? b : a)) : "mixed";
}

// ---------------------------------------------------------------- the page's parts, built once

// the section, built once and shown at the last snapshot; with no timeline, the section stays hidden
export function renderTimeline() {
  const section = document.getElementById("timeline-section");
  if (!section || !TIMELINE) return;
  const slider = el("input", {
    type: "range",
    id: "tl-slider",
    min: 0,
    max: SNAPS.length - 1,
    value: timelineView.k,
    "aria-label": "training step",
    oninput: (e) => showSnapshot(Number(e.target.value)),
  });
  section.append(
    el("h2", { text: "Watch it learn: the run's timeline" }),
    el("p", {
      class: "hint",
      text:
        `${SNAPS.length} snapshots, one per evaluation (timeline.jsonl). Move the slider to see the model ` +
        "at that step: where each head looks on the probe, the role it plays, and what it predicts.",
    }),
    el("div", { class: "tl-controls" }, slider, el("span", { id: "tl-step" })),
    el(
      "div",
      { class: "tl-charts" },
      svgEl("svg", { id: "tl-loss", viewBox: "0 0 460 260", role: "img", "aria-label": "loss over steps" }),
      el("div", { id: "tl-roles" }),
    ),
    el("div", { id: "tl-legend" }),
    el("h3", { text: "Every head's attention on the probe, with its role at this step" }),
    el("div", { id: "tl-maps" }),
    el("h3", { text: "The five likeliest next characters after each character of the probe" }),
    el("div", { id: "tl-top5" }),
    el("h3", { text: "A sample at this step (temperature 0.8, the same seed at every step)" }),
    el("pre", { id: "tl-sample" }),
  );
  buildLossChart();
  buildRoleCharts();
  buildHeadLegend();
  buildTimelineMaps();
  section.hidden = false;
  showSnapshot(timelineView.k);
  window.tinygptTimeline = {
    show: showSnapshot,
    shown: () => timelineView.k,
    cell: CELL,
    margin: AXIS.margin,
  };
}

function stepAxes(svg, sy, lo, hi, w, h) {
  const last = STEPS[STEPS.length - 1];
  svg.append(
    svgEl("line", { class: "axis", x1: 45, y1: h - 25, x2: w - 10, y2: h - 25 }),
    svgEl("line", { class: "axis", x1: 45, y1: 10, x2: 45, y2: h - 25 }),
    svgEl("text", { class: "tick", x: 40, y: sy(hi) + 4, "text-anchor": "end" }, hi.toFixed(2)),
    svgEl("text", { class: "tick", x: 40, y: sy(lo) + 4, "text-anchor": "end" }, lo.toFixed(2)),
    svgEl("text", { class: "tick", x: 45, y: h - 10 }, String(STEPS[0])),
    svgEl("text", { class: "tick", x: w - 10, y: h - 10, "text-anchor": "end" }, `step ${last}`),
    svgEl("line", { class: "tl-marker", y1: 10, y2: h - 25 }),
  );
}

function buildLossChart() {
  const svg = document.getElementById("tl-loss");
  const losses = SNAPS.flatMap((s) => [s.train_loss, s.val_loss]);
  const lo = Math.min(...losses),
    hi = Math.max(...losses);
  const sx = scaleOf(STEPS, 50, 450),
    sy = scaleOf(losses, 235, 15);
  stepAxes(svg, sy, lo, hi, 460, 260);
  for (const key of ["train_loss", "val_loss"]) {
    const points = SNAPS.map((s) => `${sx(s.step).toFixed(1)},${sy(s[key]).toFixed(1)}`).join(" ");
    svg.append(svgEl("polyline", { class: key === "train_loss" ? "train" : "val", points }));
  }
  svg.append(
    svgEl("text", { id: "tl-loss-train", class: "tick train", x: 440, y: 28, "text-anchor": "end" }),
    svgEl("text", { id: "tl-loss-val", class: "tick val", x: 440, y: 44, "text-anchor": "end" }),
  );
}

function buildRoleCharts() {
  const box = document.getElementById("tl-roles");
  const sx = scaleOf(STEPS, 50, 290),
    sy = (score) => 130 - score * 115;
  for (const role of TIMELINE.roles) {
    const svg = svgEl("svg", { class: "tl-role", viewBox: "0 0 300 160", role: "img" });
    stepAxes(svg, sy, 0, 1, 300, 160);
    const bar = sy(TIMELINE.thresholds[role]);
    svg.append(
      svgEl("line", { class: "tl-threshold", x1: 45, x2: 290, y1: bar, y2: bar }),
      svgEl("text", { class: "tick", x: 52, y: 20 }, role), // at the left: the marker ends at the right
    );
    SNAPS[0].heads.forEach((_, n) => {
      const { layer, head } = SNAPS[0].heads[n];
      const points = SNAPS.map((s) => `${sx(s.step).toFixed(1)},${sy(s.heads[n].scores[role]).toFixed(1)}`);
      const line = svgEl("polyline", {
        class: "tl-head",
        stroke: headColor(layer, head),
        points: points.join(" "),
      });
      line.append(svgEl("title", {}, `head ${layer}.${head}: ${role}`));
      svg.append(line);
    });
    box.append(svg);
  }
}

// which colour is which head, in the role charts and over the heatmaps
function buildHeadLegend() {
  const items = SNAPS[0].heads.map(({ layer, head }) => {
    const swatch = el("span", { class: "tl-swatch" });
    swatch.style.background = headColor(layer, head);
    return el(
      "span",
      { class: "tl-key", "data-layer": layer, "data-head": head },
      swatch,
      `head ${layer}.${head}`,
    );
  });
  document
    .getElementById("tl-legend")
    .replaceChildren(el("span", { class: "hint", text: "a line per head:" }), ...items);
}

function buildTimelineMaps() {
  const P = SNAPS[0].probe.length;
  const table = el("table");
  const header = el("tr", {}, el("th"));
  for (let hd = 0; hd < DATA.config.n_head; hd++) header.append(el("th", { text: `head ${hd}` }));
  table.append(header);
  for (let L = 0; L < DATA.config.n_layer; L++) {
    const tr = el("tr", {}, el("th", { text: `layer ${L}` }));
    for (let hd = 0; hd < DATA.config.n_head; hd++) {
      const side = AXIS.margin + P * CELL;
      const canvas = el("canvas", { width: side, height: side, "data-layer": L, "data-head": hd });
      const caption = el("div", { class: "tl-label", style: `color: ${headColor(L, hd)}` });
      tr.append(el("td", {}, caption, canvas));
    }
    table.append(tr);
  }
  document.getElementById("tl-maps").replaceChildren(table);
}

// ---------------------------------------------------------------- what changes with the step

function showSnapshot(k) {
  timelineView.k = k;
  const s = SNAPS[k];
  document.getElementById("tl-slider").value = k;
  document.getElementById("tl-step").textContent =
    `step ${s.step} (snapshot ${k + 1} of ${SNAPS.length}): train loss ${s.train_loss.toFixed(3)}, ` +
    `val loss ${s.val_loss.toFixed(3)}`;
  for (const marker of document.querySelectorAll("#timeline-section .tl-marker")) {
    const svg = marker.ownerSVGElement;
    const right = svg.viewBox.baseVal.width - 10;
    const x = scaleOf(STEPS, 50, right)(s.step).toFixed(1);
    marker.setAttribute("x1", x);
    marker.setAttribute("x2", x);
  }
  document.getElementById("tl-loss-train").textContent = `train ${s.train_loss.toFixed(3)}`;
  document.getElementById("tl-loss-val").textContent = `val ${s.val_loss.toFixed(3)}`;
  drawTimelineMaps(s);
  renderTimelineTop5(s);
  document.getElementById("tl-sample").textContent = s.sample;
}

function drawTimelineMaps(s) {
  const byHead = new Map(s.heads.map((h) => [`${h.layer}.${h.head}`, h]));
  for (const canvas of document.querySelectorAll("#tl-maps canvas")) {
    const L = Number(canvas.dataset.layer),
      hd = Number(canvas.dataset.head);
    const rows = s.attention[L][hd]; // rows[i]: the i + 1 weights of query i
    const P = rows.length;
    const ctx = canvas.getContext("2d");
    const at = (t) => AXIS.margin + t * CELL;
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    for (let i = 0; i < P; i++)
      for (let j = 0; j < P; j++) {
        ctx.fillStyle = j > i ? "#e6e9ef" : shadeOf(rows[i][j]);
        ctx.fillRect(at(j), at(i), CELL, CELL);
      }
    // the axes: keys along the top, queries down the left, each its probe character
    ctx.fillStyle = "#5d6677";
    ctx.font = `${AXIS.font}px ui-monospace, "DejaVu Sans Mono", monospace`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (let t = 0; t < P; t += AXIS.every) {
      ctx.fillText(glyph(s.probe[t]), at(t + 0.5), AXIS.margin / 2);
      ctx.fillText(glyph(s.probe[t]), AXIS.margin / 2, at(t + 0.5));
    }
    canvas.dataset.step = s.step;
    const h = byHead.get(`${L}.${hd}`);
    const role = roleLabel(h.scores);
    const score = role === "mixed" ? "" : ` ${h.scores[role].toFixed(2)}`;
    canvas.previousSibling.textContent = `${L}.${hd} ${role}${score}`;
  }
}

function renderTimelineTop5(s) {
  const columns = Array.from(s.probe, (c, i) =>
    el(
      "div",
      { class: "tl-col" },
      el("div", { class: "tl-char", text: glyph(c) }),
      ...s.top5[i].map(([next, p]) =>
        el("div", { class: "tl-next", text: `${glyph(next)} ${p.toFixed(2)}` }),
      ),
    ),
  );
  document.getElementById("tl-top5").replaceChildren(...columns);
}
