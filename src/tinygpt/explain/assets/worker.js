// The Web Worker's script: it runs the forward pass of a large model off the page's thread. The page
// (runner.js) starts it from the text of this module and those it imports, joined as the page's own
// script is (tinygpt.explain.page.page_script), after the data it needs as self.tinygptData; then hands it
// the weights once and a prompt at a time, and takes back each trace.

import { forward, setWeights } from "./model.js";

// every array buffer a trace holds, once each, so that it moves to the page instead of being copied
function buffers(trace) {
  const arrays = [trace.tok_emb, trace.pos_emb, trace.stream, ...trace.lens];
  for (const lt of trace.layers) arrays.push(...Object.values(lt));
  return [...new Set(arrays.map((array) => array.buffer))];
}

self.onmessage = (e) => {
  const { weights, ids, off, mode } = e.data;
  if (weights) {
    setWeights(weights);
    return;
  }
  const trace = forward(ids, new Set(off), mode);
  self.postMessage({ trace }, buffers(trace));
};
