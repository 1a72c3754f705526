// The neurons section (tinygpt.explain.neurons, the page's data from tinygpt.explain.page_sections): a
// layer's costliest MLP neurons, sorted by what switching one off costs, each with its density, words and
// promoted characters; a click on one shows its strongest contexts with the firing character marked.
// main.js draws it with renderNeurons; nothing here draws on import.
//
// Short names: n a neuron's row of the data, cx one of its contexts.
import { DATA, el, glyph, percent } from "./base.js";

const NEURONS = DATA.neurons; // {positions, loss, firing, per_layer, layers: [[neuron, …], …]}, or null
const BEFORE = 30; // characters neuronView before the firing one (tinygpt.explain.neurons.BEFORE)
const neuronView = { layer: 0, neuron: null }; // the layer listed, and the neuron opened (its index), if any

const glyphs = (text) => Array.from(text, glyph).join("");
const signed = (value, digits) => `${value >= 0 ? "+" : ""}${value.toFixed(digits)}`;
const amounts = (pairs) => pairs.map(([c, value]) => `${glyph(c)} ${signed(value, 3)}`).join("  ");

// mirrors tinygpt.explain.neurons.marked: up to BEFORE characters read before, the firing one marked
function markedContext(cx) {
  const before = Array.from(cx.seen);
  const firing = before.pop();
  return el(
    "span",
    { class: "context" },
    before.length > BEFORE ? "…" : "",
    glyphs(before.slice(-BEFORE).join("")),
    el("mark", { text: glyph(firing) }),
    glyphs(cx.after),
  );
}

function neuronRow(n) {
  return el(
    "tr",
    {
      "data-neuron": n.neuron,
      class: n.neuron === neuronView.neuron ? "picked" : "",
      onclick: () => openNeuron(n.neuron === neuronView.neuron ? null : n.neuron),
    },
    el("td", { class: "name", text: `${n.layer}.${n.neuron}` }),
    el("td", { class: "num cost", "data-value": String(n.cost), text: signed(n.cost, 4) }),
    el("td", { class: "num density", "data-value": String(n.density), text: percent(n.density, 1) }),
    el("td", { class: "promotes", text: n.promotes.map(([c]) => glyph(c)).join(" ") }),
    el("td", { class: "words", text: n.words }),
  );
}

function neuronDetail(n) {
  return el(
    "div",
    { id: "neuron-detail", "data-layer": n.layer, "data-neuron": n.neuron },
    el("h3", { text: `Neuron ${n.layer}.${n.neuron}` }),
    el("p", {
      text:
        `Fires above ${NEURONS.firing} × its largest activation (${n.largest.toFixed(4)}) at ` +
        `${percent(n.density, 2)} of the positions; its mean activation ${signed(n.mean, 4)}. ` +
        `Switching it off (its mean in its place) costs ${signed(n.cost, 5)} nats, estimated to first order.`,
    }),
    el("p", { class: "effect", text: `promotes  ${amounts(n.promotes)}` }),
    el("p", { class: "effect", text: `suppresses  ${amounts(n.suppresses)}` }),
    el(
      "table",
      { class: "contexts" },
      ...n.contexts.map((cx) =>
        el("tr", {}, el("td", { class: "num", text: cx.value.toFixed(4) }), el("td", {}, markedContext(cx))),
      ),
    ),
  );
}

function openNeuron(neuron) {
  neuronView.neuron = neuron;
  drawNeurons();
}

function openLayer(layer) {
  Object.assign(neuronView, { layer, neuron: null });
  drawNeurons();
}

function drawNeurons() {
  const box = document.getElementById("neurons");
  const listed = NEURONS.layers[neuronView.layer];
  const buttons = NEURONS.layers.map((_, layer) =>
    el("button", {
      type: "button",
      class: `layer-pick${layer === neuronView.layer ? " picked" : ""}`,
      "data-layer": layer,
      text: `layer ${layer}`,
      onclick: () => openLayer(layer),
    }),
  );
  const head = el(
    "tr",
    {},
    ...["neuron", "cost", "density", "promotes", "in words"].map((name) => el("th", { text: name })),
  );
  const opened = listed.find((n) => n.neuron === neuronView.neuron);
  box.replaceChildren(
    el("div", { class: "layer-picks" }, ...buttons),
    el("p", {
      class: "note",
      text:
        `The ${listed.length} of layer ${neuronView.layer}'s ${NEURONS.per_layer} neurons that cost most to switch ` +
        `off (inspect --neurons --json lists every one), measured on ${NEURONS.positions.toLocaleString("en")} ` +
        `validation positions (loss ${NEURONS.loss.toFixed(4)}).`,
    }),
    el("table", { id: "neuron-list" }, head, ...listed.map(neuronRow)),
    opened ? neuronDetail(opened) : "",
  );
}

// the section: the first layer's list; without neurons, why not
export function renderNeurons() {
  document.getElementById("neurons-note").textContent = DATA.neurons_note || "";
  if (NEURONS) drawNeurons();
}
