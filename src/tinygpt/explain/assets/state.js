// What the page shows (the prompt's trace, the selected layer, head and position, the heads switched off)
// and the views drawn from it: each view registers to be drawn again when the trace or the selection
// changes, so this module needs none of them.

import { DATA, VOCAB } from "./base.js";
import { forward, headName } from "./model.js";

export const state = {
  trace: null,
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

// run the shown prompt again, with the heads switched off and the mode as they now are
const rerun = () => setTrace(forward(state.trace.ids, state.off, state.mode));

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
