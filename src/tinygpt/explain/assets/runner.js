// Where the forward pass runs: on the page's thread for a small model; for a large one (more than
// tinygpt.explain.page.PACK_LIMIT parameters) in a Web Worker, so that the page stays responsive while the
// model reads a prompt. The worker is started from the worker's script inlined in the page (a page opened
// from disk can start a worker from a Blob, not from a file); where none can start, or it fails, the
// page's own thread runs the model, as for a small one.

import { DATA } from "./base.js";
import { forward, W } from "./model.js";

const jobs = []; // waiting for the worker, in order: { ids, off, mode, key, resolve }
let running = null; // the job the worker is on
let worker = W && DATA.worker ? startWorker() : null;

// where the model runs now: "worker" or "page"
export const runsIn = () => (worker ? "worker" : "page");

function startWorker() {
  const script = document.getElementById("tinygpt-worker").textContent;
  const data = { config: DATA.config, vocab: DATA.vocab, means: DATA.means }; // all that model.js reads
  const source = `self.tinygptData = ${JSON.stringify(data)};\n${script}`;
  let started;
  try {
    started = new Worker(URL.createObjectURL(new Blob([source], { type: "text/javascript" })));
  } catch (error) {
    console.warn(`no Web Worker (${error.message}): the model runs on the page's thread`);
    return null;
  }
  started.onmessage = (e) => {
    const job = running;
    running = null;
    job.resolve(e.data.trace);
    next();
  };
  started.onerror = (e) => {
    console.warn(`the Web Worker failed (${e.message}): the model runs on the page's thread from now on`);
    worker = null;
    for (const job of [running, ...jobs.splice(0)].filter(Boolean))
      job.resolve(forward(job.ids, new Set(job.off), job.mode));
    running = null;
  };
  // the weights in base64, as the page carries them: the worker decodes them, the page's thread only the
  // few that attribution.js reads (model.js), and no 43 MB of float32 arrays are copied between the two
  started.postMessage({ weights: DATA.weights });
  return started;
}

// the next waiting job to the worker, when it is free
function next() {
  if (running || !jobs.length) return;
  running = jobs.shift();
  const { ids, off, mode } = running;
  worker.postMessage({ ids, off, mode });
}

// The trace of ids with the heads named in `off` switched off (mode "zero" or "mean"), as a promise. A job
// with a `key` replaces a job of the same key still waiting, which then gives null: the page's own runs
// share one, so that typing fast runs the prompt as it is now, not every prompt on the way.
export function run(ids, off = new Set(), mode = "zero", key = null) {
  if (!worker) return Promise.resolve(forward(ids, off, mode));
  return new Promise((resolve) => {
    const waiting = key === null ? -1 : jobs.findIndex((job) => job.key === key);
    if (waiting >= 0) jobs.splice(waiting, 1)[0].resolve(null);
    jobs.push({ ids, off: [...off], mode, key, resolve });
    next();
  });
}
