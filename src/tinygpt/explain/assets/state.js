// What the page shows (the prompt's trace, the selected layer, head and position, the heads switched off)
// and the views drawn from it: each view registers to be drawn again when the trace or the selection
// changes, so this module needs none of them.

import { DATA, VOCAB } from "./base.js";
import { headName } from "./model.js";
import { run } from "./runner.js";

export const state = {
  trace: null,
  ids: null, // the prompt last asked for: the trace's, or the one on its way from the worker (runner.js)
  layer: DATA.selection.layer,
  head: DATA.selection.head,
  token: DATA.selection.token,
  off: new Set(DATA.off), // the heads switched off, by headName (at first, those the page was written with)
  mode: DATA.mode, // what a switched-off head outputs: "zero" or "mean" (tinygpt.explain.ablate.MODES)
  backward: false, // the backward panel is open
};
export const chars = () => state.trace.ids.map((id) => VOCAB[id]);

const views = { trace: [], selection: [] }; // what to draw again when the trace, or only the selection, changes

// onTrace(f, …): draw with f after every new trace; onSelection(f, …): after every new selection too
export function onTrace(...draw) {
  views.trace.push(...draw);
}
export function onSelection(...draw) {
  views.selection.push(...draw);
}

export function setTrace(trace) {
  const wasLast = state.trace && state.token === state.trace.T - 1;
  state.trace = trace;
  if (wasLast || state.token >= trace.T) state.token = trace.T - 1;
  document.getElementById("tooltip").hidden = true; // it spoke of the maps just replaced
  for (const draw of views.trace) draw();
}

// Run the model on ids with the heads switched off and the mode as they now are, and show the trace when
// it comes: at once on the page's thread, or from the worker for a large model, "Running the model…" said
// meanwhile. A run asked for while another waits replaces it (runner.js). Returns the promise of it shown.
let waiting = 0; // runs asked for and not yet back
export function show(ids) {
  state.ids = ids;
  const running = document.getElementById("running");
  running.hidden = false;
  waiting++;
  return run(ids, state.off, state.mode, "shown").then((trace) => {
    waiting--;
    running.hidden = waiting === 0;
    if (trace) setTrace(trace);
  });
}

// run the shown prompt again, with the heads switched off and the mode as they now are
const rerun = () => show(state.ids);

// a click on a head's label: switch it off, or back on, and run the model again
export function toggleHead(layer, hd) {
  const name = headName(layer, hd);
  if (state.off.has(name)) state.off.delete(name);
  else state.off.add(name);
  rerun();
}

export function allHeadsOn() {
  state.off.clear();
  rerun();
}

// the mode switch: a switched-off head outputs 0, or its mean output over validation text
export function setMode(mode) {
  state.mode = mode;
  document.querySelector(`#ablation-mode input[value="${mode}"]`).checked = true;
  rerun();
}

export function select(layer, head, token) {
  Object.assign(state, { layer, head, token });
  for (const draw of views.selection) draw();
}
