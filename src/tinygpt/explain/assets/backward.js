// The backward pass of one row (steps 1–7 of explain --backward), from the page's own forward pass and
// the gradients Python computed when the page was written.

import { CFG, DATA, decode, HS, headAt, NH, rowAt, rowOf, V } from "./base.js";
import { rowArithmetic, softmax } from "./model.js";

// computed in Python when the page was written, for its prompt (tinygpt.explain.page.backward_data and
// step_data), each (T − 1, n_layer, NH, width) for the loss at position i and head hd of `layer`:
//   g          the gradient reaching the head's output (width HS; backward.head_output_gradients)
//   after      step 7: row i's weights after one plain gradient step of size lr on the head's q, k, v
//              rows of c_attn (width T, zero beyond key i; backward.step_effects)
//   lossAfter  step 7: the loss at i after that step (width 1)
export const BACKWARD = {
  ids: DATA.backward.ids,
  g: decode(DATA.backward.g),
  lr: DATA.backward.step.lr,
  after: decode(DATA.backward.step.after),
  lossAfter: decode(DATA.backward.step.loss_after),
};
const gradAt = (i, layer, hd, d = 0, width = HS) => ((i * CFG.n_layer + layer) * NH + hd) * width + d;

// why the backward panel cannot follow position i of this trace back, or null when it can
export function backwardUnavailable(trace, i) {
  if (trace.off.size) return "The backward pass is shown with every head on: switch them back on to see it.";
  const same = trace.ids.length === BACKWARD.ids.length && trace.ids.every((id, t) => id === BACKWARD.ids[t]);
  if (!same)
    return (
      "The gradient reaching each head comes from Python, computed when the page was written for its prompt " +
      `${JSON.stringify(DATA.prompt)}: type that prompt again to see it, or write the page with another --prompt.`
    );
  if (i >= trace.T - 1)
    return `Position ${i} is the last: the character after it is not in the prompt, so there is no loss to follow back. Click an earlier character.`;
  return null;
}

// mirrors tinygpt.explain.backward.row_backward
// steps 1–7 of tinygpt.explain.backward for the loss L of predicting the character after position i
// (n = i + 1 keys): every gradient from the page's own forward pass and the g Python computed, and
// step 7's weights and loss after the step, as Python computed them
export function rowBackward(trace, layer, hd, i) {
  const T = trace.T,
    lt = trace.layers[layer],
    n = i + 1;
  const row = rowArithmetic(lt.q, lt.k, lt.v, hd, i, T);
  const target = trace.ids[i + 1];
  const probs = softmax(rowOf(trace.logits, i, V));
  const dlogits = probs.map((p, id) => p - (id === target ? 1 : 0)); // softmax − onehot
  const g = BACKWARD.g.subarray(gradAt(i, layer, hd), gradAt(i, layer, hd, HS)); // dL/dy
  const w = row.weights.subarray(0, n);
  const dw = new Float64Array(n), // dL/dw_j = g · v_j
    dv = new Float64Array(n * HS); // dL/dv_j = w_j · g, row j of (n, HS)
  for (let j = 0; j < n; j++)
    for (let d = 0; d < HS; d++) {
      dw[j] += g[d] * lt.v[headAt(T, hd, j, d)];
      dv[rowAt(j, d, HS)] = w[j] * g[d];
    }
  const mean = w.reduce((sum, wj, j) => sum + wj * dw[j], 0); // Σ_k w_k · dL/dw_k
  const ds = w.map((wj, j) => wj * (dw[j] - mean)); // through the softmax
  const ddot = ds.map((value) => value / Math.sqrt(HS)); // through the scale
  const dq = new Float64Array(HS),
    dk = new Float64Array(n * HS);
  for (let j = 0; j < n; j++)
    for (let d = 0; d < HS; d++) {
      dq[d] += ddot[j] * lt.k[headAt(T, hd, j, d)];
      dk[rowAt(j, d, HS)] = ddot[j] * lt.q[headAt(T, hd, i, d)];
    }
  const after = BACKWARD.after.subarray(gradAt(i, layer, hd, 0, T), gradAt(i, layer, hd, n, T)); // T: its prompt's
  const lossAfter = BACKWARD.lossAfter[gradAt(i, layer, hd, 0, 1)];
  return {
    target,
    loss: -Math.log(probs[target]),
    dlogits,
    g,
    w,
    dw,
    dv,
    mean,
    ds,
    ddot,
    dq,
    dk,
    after,
    lossAfter,
  };
}
