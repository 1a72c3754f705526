// The worked example at the top of the page: attention's four steps on numbers small enough to check.

import { headerRow, line } from "./arithmetic.js";
import { el, fmt } from "./base.js";
import { rowArithmetic } from "./model.js";

// attention.py's worked example: one query, three keys and values of 2 dimensions
const EXAMPLE = {
  q: [1.0, 0.5],
  keys: [
    [1.0, 0.0],
    [0.5, 1.0],
    [1.5, 1.0],
  ],
  values: [
    [0.5, 1.0],
    [1.0, 0.0],
    [1.5, 1.0],
  ],
};

// mirrors tinygpt.explain.walkthrough.walkthrough_of_vectors
// the example through rowArithmetic, the very function the model's rows go through: the query is the
// last of 3 positions, so it sees all three keys
export function renderExample() {
  const { q, keys, values } = EXAMPLE;
  const T = keys.length,
    hs = q.length;
  const qs = new Float64Array(T * hs);
  qs.set(q, (T - 1) * hs);
  const row = rowArithmetic(
    qs,
    Float64Array.from(keys.flat()),
    Float64Array.from(values.flat()),
    0,
    T - 1,
    T,
    hs,
  );
  const pair = (xs) => `[${xs.map((x) => x.toFixed(1)).join(", ")}]`;
  const table = el(
    "table",
    {},
    headerRow(
      ["j", "key k_j", "value v_j", "1. q · k_j", `2. ÷ √${hs}`, "3. weight", "4. weight × v_j"],
      () => "",
    ),
  );
  keys.forEach((k, j) => {
    const weighted = values[j].map((x) => fmt(row.weights[j] * x)).join(", ");
    table.append(
      el(
        "tr",
        {},
        el("td", { text: String(j) }),
        el("td", { text: pair(k) }),
        el("td", { text: pair(values[j]) }),
        el("td", { text: `${q[0]}×${k[0]} + ${q[1]}×${k[1]} = ${fmt(row.dots[j])}` }),
        el("td", { text: fmt(row.scores[j]) }),
        el("td", { class: "w", text: fmt(row.weights[j]) }),
        el("td", { text: `[${weighted}]` }),
      ),
    );
  });
  document
    .getElementById("example")
    .replaceChildren(
      line(`q = ${pair(q)}, d = ${hs}`),
      table,
      line(
        `softmax: exp(score − ${fmt(row.max)}) / ${fmt(row.total)}; output = the sum of the last column = `,
        el("span", { id: "example-output", text: `[${Array.from(row.output, fmt).join(", ")}]` }),
      ),
    );
}
