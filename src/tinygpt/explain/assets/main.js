// The page's one script starts here (tinygpt.explain.page puts every module it imports before it): it
// hands the tests their window.tinygpt, registers the views with the state and draws the page.
//
// One pattern for every module: a module draws nothing when it is imported. It exports its views as
// render… functions (draw, or draw again, from DATA and the state) and its controls as setup… functions
// (wire them once), and this script alone calls them: the views of the trace and of the selection are
// registered with the state below (onTrace, onSelection), the others drawn once, the controls set up once.

import { renderArithmetic, setupBackward } from "./arithmetic.js";
import { logitParts, renderAttribution } from "./attribution.js";
import { backwardUnavailable, rowBackward } from "./backward.js";
import { DATA, ID, rowOf, V } from "./base.js";
import { renderCurves, renderPca } from "./charts.js";
import { renderCircuits } from "./circuits.js";
import { renderExample } from "./example.js";
import { renderFeatures } from "./features.js";
import { markGrid, renderGrid, setupModeSwitch } from "./grid.js";
import { traceFromData, W } from "./model.js";
import { renderNeurons } from "./neurons.js";
import { renderAbout, renderTokens, runPrompt, setupPrompt } from "./prompt.js";
import { run, runsIn } from "./runner.js";
import { onSelection, onTrace, select, setTrace, show, state, toggleHead } from "./state.js";
import { renderTimeline } from "./timeline.js";

// rows of a (T, V) array as nested lists
const rowsOf = (arr, T) => Array.from({ length: T }, (_, t) => Array.from(rowOf(arr, t, V)));

window.tinygpt = {
  state,
  select,
  toggleHead,
  // each a promise: of the prompt shown; of the model's numbers below (from the worker for a large model)
  setPrompt: (text) => runPrompt(text),
  runsIn, // where the model runs: "worker" or "page"
  // the logits (T, V) of ids with the heads named in `off` ("L.H") switched off, in mode "zero" or "mean"
  logits:
    W &&
    ((ids, off = [], mode = "zero") =>
      run(ids, new Set(off), mode).then((trace) => rowsOf(trace.logits, ids.length))),
  // the logit lens of ids: (n_layer, T, V)
  lens: W && ((ids) => run(ids).then((trace) => trace.lens.map((logits) => rowsOf(logits, ids.length)))),
  // the direct logit attribution of the predicted character after position t of ids, heads in `off` switched off
  attribution:
    W &&
    ((ids, t, off = [], mode = "zero") => run(ids, new Set(off), mode).then((trace) => logitParts(trace, t))),
  // the backward panel's numbers for position i of the shown prompt through head hd of `layer`
  backward: (layer, hd, i) => {
    const why = backwardUnavailable(state.trace, i);
    if (why) throw new Error(why);
    const b = rowBackward(state.trace, layer, hd, i);
    return Object.fromEntries(
      Object.entries(b).map(([name, value]) => [name, typeof value === "number" ? value : Array.from(value)]),
    );
  },
};

onTrace(renderTokens, renderGrid, renderArithmetic, renderPca, renderAttribution);
onSelection(renderTokens, markGrid, renderArithmetic, renderAttribution);
renderAbout();
renderExample();
renderCurves();
renderCircuits();
renderNeurons();
renderFeatures();
renderTimeline();
setupPrompt();
setupModeSwitch();
setupBackward();
window.addEventListener("resize", () => state.trace && renderGrid()); // the maps take the grid's new width
if (W) show(Array.from(DATA.prompt, (c) => ID.get(c)));
else setTrace(traceFromData(DATA.trace));
