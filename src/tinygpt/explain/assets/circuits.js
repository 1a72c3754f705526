// The circuit view (tinygpt.explain.circuits): every head as a node, a column per layer, and each
// composition at least `strong` (1.5× what random matrices score) as an edge from the head that writes
// to the head that reads, coloured by kind (Q, K or V) and as thick as its score; and under each head's
// heatmap, the head in words (tinygpt.explain.describe). main.js draws it with renderCircuits; nothing here
// draws on import.
//
// Short names: L a layer, hd a head, e an edge, sx and sy where a node sits.
import { CFG, DATA, el, NH, svgEl } from "./base.js";

const CIRCUITS = DATA.circuits; // {edges, baseline, strong, heads, heads_note}, or null
const KIND_WORDS = {
  Q: "Q-composition: what the first head writes moves the second's queries",
  K: "K-composition: what the first head writes moves the second's keys",
  V: "V-composition: the second head passes on what the first head wrote",
};

// ---------------------------------------------------------------- the graph

// the heads as nodes, a column per layer, and `strong` (the compositions drawn) as edges
function circuitGraph(strong) {
  const NL = CFG.n_layer;
  const w = 140 + 170 * (NL - 1),
    h = 50 + 56 * NH;
  const sx = (L) => 70 + 170 * L,
    sy = (hd) => 40 + 56 * hd;
  const svg = svgEl("svg", {
    id: "circuit-graph",
    viewBox: `0 0 ${w} ${h}`,
    style: `width: ${w}px`, // its own size, not the page's svg rule
    role: "img",
    "aria-label": "heads as nodes, strong compositions as edges",
  });
  const top = Math.max(...CIRCUITS.edges.map((e) => e.score), CIRCUITS.strong);
  for (const e of strong) {
    const [x1, y1, x2, y2] = [sx(e.source[0]), sy(e.source[1]), sx(e.target[0]), sy(e.target[1])];
    const bend = { Q: -18, K: 0, V: 18 }[e.kind];
    const path = svgEl("path", {
      class: `edge ${e.kind}`,
      d: `M ${x1} ${y1} Q ${(x1 + x2) / 2} ${(y1 + y2) / 2 + bend} ${x2} ${y2}`,
      "stroke-width": (1 + 7 * (e.score / top)).toFixed(1),
    });
    const [a, b] = [e.source.join("."), e.target.join(".")];
    path.append(svgEl("title", {}, `${a} → ${b}: ${KIND_WORDS[e.kind]}; score ${e.score.toFixed(3)}`));
    svg.append(path);
  }
  for (let L = 0; L < NL; L++) {
    svg.append(svgEl("text", { class: "tick", x: sx(L), y: 16, "text-anchor": "middle" }, `layer ${L}`));
    for (let hd = 0; hd < NH; hd++) {
      svg.append(
        svgEl("circle", { class: "node", cx: sx(L), cy: sy(hd), r: 15 }),
        svgEl("text", { class: "node-name", x: sx(L), y: sy(hd) + 4, "text-anchor": "middle" }, `${L}.${hd}`),
      );
    }
  }
  return svg;
}

function circuitEdgeList() {
  const rows = CIRCUITS.edges
    .slice(0, 8)
    .map((e) =>
      el(
        "tr",
        { class: e.score >= CIRCUITS.strong ? "strong" : "" },
        el("td", { text: `${e.kind}-comp` }),
        el("td", { text: `${e.source.join(".")} → ${e.target.join(".")}` }),
        el("td", { class: "num", text: e.score.toFixed(3) }),
      ),
    );
  return el("table", { id: "circuit-edges" }, ...rows);
}

// the section, and each head in words on its card (again whenever the grid is drawn again: a head switched
// off, another prompt); with no circuits, the section stays hidden
export function renderCircuits() {
  const section = document.getElementById("circuits-section");
  if (!section || !CIRCUITS) return;
  const NL = CFG.n_layer;
  const strong = CIRCUITS.edges.filter((e) => e.score >= CIRCUITS.strong);
  const words =
    NL < 2
      ? "One layer: no head reads what another head wrote, so nothing composes."
      : `Each score is the size of the product of the two heads' matrices over the product of their sizes ` +
        `(inspect --circuits prints them). Two random matrices score about ${CIRCUITS.baseline.toFixed(3)}; ` +
        `edges are drawn from ${CIRCUITS.strong.toFixed(3)} ` +
        `(${(CIRCUITS.strong / CIRCUITS.baseline).toFixed(1)}× that) up, ${strong.length} of ` +
        `${CIRCUITS.edges.length}. Blue: Q, orange: K, green: V. An induction head reads a previous-token ` +
        "head by K-composition: its keys carry the character before each position.";
  section.append(
    el("h2", { text: "How heads compose: from the weights alone" }),
    el("p", { class: "hint", text: words }),
    el("div", { class: "circuit-row" }, circuitGraph(strong), circuitEdgeList()),
  );
  if (CIRCUITS.heads_note) section.append(el("p", { class: "note", text: CIRCUITS.heads_note }));
  section.hidden = false;
  describeHeadCards();
  new MutationObserver(describeHeadCards).observe(document.getElementById("grid"), { childList: true });
}

// ---------------------------------------------------------------- each head in words, on its card

function describeHeadCards() {
  if (!CIRCUITS.heads) return;
  for (const h of CIRCUITS.heads) {
    const card = document.querySelector(`#grid figure.card[data-layer="${h.layer}"][data-head="${h.head}"]`);
    if (card && !card.querySelector(".words")) card.append(el("p", { class: "words", text: h.description }));
  }
}
