// The features section (tinygpt.explain.features, the page's data from tinygpt.explain.page_sections):
// for each feature file of the run, its quality beside the control's and its best-described features with
// their descriptions and scores; a click on one shows its contexts, each character shaded by the feature's
// activation there, its histogram and the characters it promotes. Without feature files, how to make
// them. main.js draws it with renderFeatures; nothing here draws on import.
//
// Short names: file one feature file's data, note one feature's, cx one of its contexts.
import { DATA, el, glyph, percent } from "./base.js";

const FILES = DATA.features; // [{hook, headline, size, quality, features: [note, …]}, …], or null
const featureView = { file: 0, feature: null }; // the file browsed, and the feature opened (its index), if any

const featureAmounts = (pairs) =>
  pairs.map(([c, value]) => `${glyph(c)} ${value >= 0 ? "+" : ""}${value.toFixed(3)}`);

// one context: each character shaded by the feature's activation there (as a share of its largest), the
// one it was found at outlined
function shadedContext(cx, top) {
  const acts = cx.shading;
  const box = el("span", { class: "context" });
  Array.from(cx.text).forEach((c, at) => {
    const span = el("span", {
      class: at === cx.index ? "ch firing" : "ch",
      "data-act": String(acts[at]),
      title: `${glyph(c)}: ${acts[at].toFixed(3)}`,
      text: glyph(c),
    });
    span.style.background = `rgba(230, 120, 20, ${Math.min(1, acts[at] / top).toFixed(3)})`;
    box.append(span);
  });
  return box;
}

// the histogram of its activations when firing, 0 … its largest: a bar per bin
function histogram(note) {
  const top = Math.max(...note.histogram, 1);
  const bars = note.histogram.map((count) => {
    const bar = el("span", { class: "bin", "data-count": count, title: String(count) });
    bar.style.height = `${((40 * count) / top).toFixed(1)}px`;
    return bar;
  });
  return el("div", { class: "histogram", title: `0 … ${note.max.toFixed(3)}` }, ...bars);
}

function featureDetail(file, note) {
  const words = note.explanations.length
    ? note.explanations.map(
        (e) => `${e.words}: precision ${percent(e.precision, 0)}, recall ${percent(e.recall, 0)}`,
      )
    : ["never fires on the validation text"];
  return el(
    "div",
    { id: "feature-detail", "data-feature": note.feature },
    el("h3", { text: `Feature ${note.feature} of ${file.hook}` }),
    el("p", {
      text: `Fires on ${percent(note.density, 2)} of validation positions, at most ${note.max.toFixed(3)}.`,
    }),
    el("ul", { class: "descriptions" }, ...words.map((text) => el("li", { text }))),
    el("p", { class: "hint", text: `Its activations when firing, 0 … ${note.max.toFixed(3)}:` }),
    histogram(note),
    el("p", { class: "effect", text: `promotes  ${featureAmounts(note.promoted).join("  ")}` }),
    el("p", { class: "effect", text: `suppresses  ${featureAmounts(note.suppressed).join("  ")}` }),
    el(
      "table",
      { class: "contexts" },
      ...note.contexts.map((cx) =>
        el(
          "tr",
          {},
          el("td", { class: "num", text: cx.value.toFixed(3) }),
          el("td", {}, shadedContext(cx, note.max || 1)),
        ),
      ),
    ),
  );
}

function featureRow(note) {
  return el(
    "tr",
    {
      "data-feature": note.feature,
      class: note.feature === featureView.feature ? "picked" : "",
      onclick: () => openFeature(note.feature === featureView.feature ? null : note.feature),
    },
    el("td", { class: "name", text: String(note.feature) }),
    el("td", {
      class: "num density",
      "data-value": String(note.density),
      text: percent(note.density, 2),
    }),
    el("td", {
      class: "promotes",
      text: note.promoted
        .slice(0, 3)
        .map(([c]) => glyph(c))
        .join(" "),
    }),
    el("td", { class: "words", text: note.summary }),
  );
}

function openFeature(feature) {
  featureView.feature = feature;
  drawFeatures();
}

function openFile(index) {
  Object.assign(featureView, { file: index, feature: null });
  drawFeatures();
}

function qualityTable(file) {
  const head = el(
    "tr",
    {},
    el("th", {}),
    el("th", { text: "this model" }),
    el("th", { text: "control: step-0 weights" }),
  );
  const rows = file.quality.map(([words, ours, theirs]) =>
    el(
      "tr",
      {},
      el("td", { text: words }),
      el("td", { class: "num", text: ours }),
      el("td", { class: "num", text: theirs }),
    ),
  );
  return el("table", { class: "quality" }, head, ...rows);
}

function drawFeatures() {
  const box = document.getElementById("features");
  const file = FILES[featureView.file];
  const picks = FILES.map((f, index) =>
    el("button", {
      type: "button",
      class: `layer-pick${index === featureView.file ? " picked" : ""}`,
      "data-hook": f.hook,
      text: f.hook,
      onclick: () => openFile(index),
    }),
  );
  const head = el(
    "tr",
    {},
    ...["feature", "density", "promotes", "best description (precision, recall)"].map((name) =>
      el("th", { text: name }),
    ),
  );
  const opened = file.features.find((note) => note.feature === featureView.feature);
  box.replaceChildren(
    el("div", { class: "layer-picks" }, ...picks),
    el("p", { class: "lead", text: file.headline }),
    qualityTable(file),
    el("p", {
      class: "note",
      text: `The ${file.features.length} best-described of its ${file.size.toLocaleString("en")} features (inspect --features --json lists every one).`,
    }),
    el("table", { id: "feature-list" }, head, ...file.features.map(featureRow)),
    opened ? featureDetail(file, opened) : "",
  );
}

// the section: the first file's list, and what could not be read; without feature files, how to make them
export function renderFeatures() {
  document.getElementById("features-note").textContent = DATA.features_note || "";
  if (FILES) drawFeatures();
}
