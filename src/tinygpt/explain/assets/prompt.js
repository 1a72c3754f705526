// The page's header, the prompt box (typing runs the model again) and the strip of the prompt's
// characters, each with its five likeliest next characters and the logit lens under them.

import { C, CFG, DATA, el, glyph, HS, ID, NH, quoted, V, VOCAB } from "./base.js";
import { topNext, W } from "./model.js";
import { runsIn } from "./runner.js";
import { chars, select, show, state } from "./state.js";

export function renderAbout() {
  const record = DATA.record;
  const parts = [
    `${DATA.params.toLocaleString("en")} parameters`,
    `${CFG.n_layer} layers × ${NH} heads, n_embd ${C}, d_head ${HS}, block ${CFG.block_size}`,
    `vocabulary of ${V} characters`,
  ];
  if (record.step !== undefined) parts.push(`trained ${record.step.toLocaleString("en")} steps`);
  if (record.best_val_loss !== undefined) parts.push(`best val loss ${record.best_val_loss.toFixed(4)}`);
  // the run's name is the user's: isolated, so that a direction mark in it (U+202E) turns nothing after it
  const name = el("bdi", { text: `${DATA.run}/${DATA.checkpoint}` });
  document.getElementById("about").replaceChildren(name, ` · ${parts.join(" · ")}`);
  document.getElementById("roles-note").textContent = DATA.roles_note || "";
}

export function setupPrompt() {
  const input = document.getElementById("prompt-input");
  const note = document.getElementById("prompt-note");
  if (!W) {
    input.hidden = true;
    note.textContent =
      `This model has ${DATA.params.toLocaleString("en")} parameters, more than the ` +
      `${DATA.live_limit.toLocaleString("en")} this page runs itself (more would make the page outgrow 30 MB): ` +
      "it shows the prompt computed in Python. " +
      "Run explain.py --html with another --prompt to see another.";
    return;
  }
  input.value = DATA.prompt;
  input.addEventListener("input", () => runPrompt(input.value));
  note.textContent = `Type any text made of the model's ${V} characters; everything below is recomputed in this page.`;
  document.getElementById("precision").textContent = precisionNote();
}

// how the page carries the weights and where it runs them, and what that costs in the logits
function precisionNote() {
  const where =
    runsIn() === "worker" ? "in a Web Worker, so that the page stays responsive" : "on the page's own thread";
  if (DATA.precision.dtype === "float32")
    return `The weights are PyTorch's float32 ones; the model runs in float64, ${where}.`;
  const change = DATA.precision.max_logit_change.toPrecision(2);
  return (
    `The weights travel in float16, half the bytes (models above ${DATA.pack_limit.toLocaleString("en")} ` +
    `parameters), and run in float64, ${where}: rounding them moves this prompt's logits by at most ${change} ` +
    "from PyTorch's float32 ones."
  );
}

// run the model on `text` and show it; returns the promise of it shown (none for a prompt it cannot read)
export function runPrompt(text) {
  const note = document.getElementById("prompt-note");
  let cs = Array.from(text);
  const unknown = [...new Set(cs.filter((c) => !ID.has(c)))];
  note.classList.toggle("warn", unknown.length > 0 || cs.length === 0);
  if (unknown.length) {
    note.textContent = `Not in the model's vocabulary: ${unknown.map(quoted).join(" ")}`;
    return;
  }
  if (!cs.length) {
    note.textContent = "Type at least one character.";
    return;
  }
  note.textContent = "";
  if (cs.length > CFG.block_size) {
    cs = cs.slice(-CFG.block_size);
    note.textContent = `The model reads at most ${CFG.block_size} characters: showing the last ${CFG.block_size}.`;
  }
  return show(cs.map((c) => ID.get(c)));
}

export function renderTokens() {
  const strip = document.getElementById("tokens");
  strip.replaceChildren();
  chars().forEach((c, t) => {
    const stack = el("div", { class: "col" });
    stack.append(
      el("button", {
        class: `tok${t === state.token ? " picked" : ""}`,
        "data-pos": t,
        title: `position ${t}: ${quoted(c)}`,
        text: glyph(c),
        onclick: () => select(state.layer, state.head, t),
      }),
      el("div", { class: "pos", text: String(t) }),
    );
    for (const [id, p] of topNext(state.trace.logits, t)) {
      const bar = el("div", { class: "bar" });
      bar.style.width = `${(100 * p).toFixed(1)}%`;
      stack.append(
        el(
          "div",
          { class: "guess", title: `${quoted(VOCAB[id])}: ${p.toFixed(4)}` },
          bar,
          el("span", {}, el("span", { class: "ch", text: glyph(VOCAB[id]) }), p.toFixed(2).slice(1)),
        ),
      );
    }
    stack.append(lensRows(t));
    strip.append(stack);
  });
}

// mirrors tinygpt.explain.lens.lens_view, for one position
// the logit lens under position t: per layer, the five characters it would predict, shaded by probability
function lensRows(t) {
  const box = el("div", { class: "lens" });
  state.trace.lens.forEach((logits, layer) => {
    const top = topNext(logits, t);
    const row = el("div", {
      class: "lens-row",
      "data-layer": layer,
      title: `if the model ended after layer ${layer}: ${top.map(([id, p]) => `${quoted(VOCAB[id])} ${p.toFixed(4)}`).join(", ")}`,
    });
    row.append(el("span", { class: "ln", text: `L${layer}` }));
    for (const [id, p] of top) {
      const c = el("span", { class: "lc", "data-p": p.toFixed(6), text: glyph(VOCAB[id]) });
      c.style.background = `rgba(31, 95, 191, ${Math.min(1, p).toFixed(3)})`;
      if (p > 0.5) c.style.color = "#fff";
      row.append(c);
    }
    box.append(row);
  });
  return box;
}
