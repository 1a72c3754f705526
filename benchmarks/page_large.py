"""The explainer page of a shakespeare_char-sized model (6 × 384, block 256, 10.65M parameters): its size,
how long headless Chromium takes to open it and run a 64-character prompt, and its logits against Python's.

The weights are untrained, seed 0 (neither the size nor the time depends on their values), with the 65
characters of the built-in Shakespeare corpus; the checkpoint names a corpus that is not there, so the
page has no head roles or mean ablation (a few kB: the weights are the page). The page is written by
`tinygpt explain CKPT --prompt P --html OUT`, as a user writes it, and opened from disk. Timed in the page
(performance.now(), from the start of navigation):

- open: until the first trace of the page's own 64-character prompt is drawn (the weights decoded, the
  worker started and handed them, the forward pass run in it, the page drawn);
- typed: tinygpt.setPrompt(another 64 characters) until its trace is drawn, and the page thread's longest
  task meanwhile (a PerformanceObserver of long tasks, those over 50 ms: with the worker, the drawing);
- the same two with no Web Worker (deleted before the page's script runs): the page's thread runs the
  model, and its longest task is the forward pass, the time the page would freeze at each keystroke.

Prints one JSON object (and writes it to --out): sizes, times, logits' largest differences from Python's
on the float16-rounded weights the page carries and from the float32 checkpoint's (with the bound the page
states), the page's JavaScript heap, and the machine.

    python benchmarks/page_large.py [--rounds 3] [--out benchmarks/results/page_large.json]
"""

import argparse
import json
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tinygpt.config.run_config import load_config
from tinygpt.explain.page import half_rounded
from tinygpt.files.checkpoint import build_checkpoint, load_checkpoint, save_checkpoint
from tinygpt.model import GPT, GPTConfig
from tinygpt.tokenizer import CharTokenizer

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "shakespeare_char.yaml"
CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # the built-in corpus's 65
PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks? It is "
TYPED = "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo? Deny thy fathe"
assert len(PROMPT) == len(TYPED) == 64
SHOWN = "document.getElementById('running').hidden && tinygpt.state.trace"
TYPE_AND_TIME = """async (text) => {
  const tasks = [];
  const observer = new PerformanceObserver((list) => tasks.push(...list.getEntries().map((e) => e.duration)));
  observer.observe({ type: "longtask" });
  const start = performance.now();
  await tinygpt.setPrompt(text);
  const ms = performance.now() - start;
  await new Promise((resolve) => setTimeout(resolve, 100));  // the last long task reported
  observer.disconnect();
  return { ms, longest_task_ms: Math.max(0, ...tasks) };
}"""


def checkpoint(directory: Path) -> Path:
    """shakespeare_char.yaml's model, untrained, with the corpus's 65 characters and no corpus at hand."""
    cfg = load_config(CONFIG)
    model_cfg = GPTConfig(**{**vars(cfg.model), "vocab_size": len(CHARS)})
    torch.manual_seed(0)
    model = GPT(model_cfg)
    config = cfg.to_dict()
    config["data"]["corpus"] = str(directory / "no-corpus.txt")  # the page says it has no head roles
    path = directory / "best.pt"
    save_checkpoint(build_checkpoint(model, CharTokenizer(CHARS), config, record={}), path)
    return path


def open_and_time(browser, page_file: Path, worker: bool) -> dict:
    """Open the page, time the first trace and a typed prompt, and read its logits; fail on console errors."""
    page, errors = browser.new_page(), []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    if not worker:
        page.add_init_script("delete window.Worker;")
    page.goto(page_file.as_uri(), timeout=300_000)
    page.wait_for_function(SHOWN, timeout=300_000, polling=10)
    open_ms = page.evaluate("performance.now()")
    typed = page.evaluate(TYPE_AND_TIME, TYPED)
    runs_in = page.evaluate("tinygpt.runsIn()")
    heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : null")
    ids = [CHARS.index(c) for c in PROMPT]
    logits = torch.tensor(page.evaluate("ids => tinygpt.logits(ids)", ids), dtype=torch.float64)
    page.close()
    assert errors == [], errors
    return {"runs_in": runs_in, "open_ms": open_ms, **typed, "js_heap_bytes": heap, "logits": logits}


def chromium_rounds(page_file: Path, rounds: int) -> list[dict]:
    """Each round opens the page with its worker, then without; both in one headless Chromium."""
    from playwright.sync_api import sync_playwright

    chromium = next(p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p)
    flags = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        browser = p.chromium.launch_persistent_context(
            profile, executable_path=chromium, headless=True, args=flags
        )
        results = [
            open_and_time(browser, page_file, worker) for _ in range(rounds) for worker in (True, False)
        ]
        browser.close()
    return results


def machine() -> dict:
    cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8") if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"model name\s*:\s*(.*)", cpuinfo)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    version = (
        subprocess.run([chromium, "--version"], capture_output=True, text=True).stdout.strip()
        if chromium
        else None
    )
    return {
        "cpu": model.group(1) if model else platform.processor(),
        "flags": sorted(set(re.findall(r"\b(avx2|avx512_bf16|amx_bf16)\b", cpuinfo))),
        "chromium": version,
        "torch": torch.__version__,
    }


def summary(results: list[dict], model: GPT, rounded: GPT, stated: float) -> dict:
    """Medians per way of running, and the logits' largest differences from Python's."""
    ids = torch.tensor([[CHARS.index(c) for c in PROMPT]])
    with torch.no_grad():
        exact, half = model(ids)[0][0].double(), rounded(ids)[0][0].double()
    out = {}
    for where in ("worker", "page"):
        rows = [r for r in results if r["runs_in"] == where]
        out[where] = {
            key: round(statistics.median(r[key] for r in rows), 1)
            for key in ("open_ms", "ms", "longest_task_ms")
        }
        out[where]["all_open_ms"] = [round(r["open_ms"], 1) for r in rows]
        out[where]["js_heap_mb"] = round(max(r["js_heap_bytes"] or 0 for r in rows) / 1e6, 1)
        out[where]["max_diff_from_float16_weights"] = max(
            (r["logits"] - half).abs().max().item() for r in rows
        )
        out[where]["max_diff_from_float32"] = max((r["logits"] - exact).abs().max().item() for r in rows)
    out["stated_max_logit_change"] = stated
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, page_file = checkpoint(Path(tmp)), Path(tmp) / "page.html"
        start = time.perf_counter()
        command = [
            sys.executable,
            "-m",
            "tinygpt",
            "explain",
            str(ckpt),
            "--prompt",
            PROMPT,
            "--html",
            str(page_file),
        ]
        wrote = subprocess.run(command, capture_output=True, text=True, check=True)
        write_seconds = time.perf_counter() - start
        data = json.loads(
            re.search(r'id="tinygpt-data">(.*?)</script>', page_file.read_text(encoding="utf-8")).group(1)
        )
        model = load_checkpoint(ckpt)[0].eval()
        results = chromium_rounds(page_file, args.rounds)
        result = {
            "model": "configs/shakespeare_char.yaml's shape, untrained (seed 0), 65 characters",
            "parameters": model.num_params(),
            "prompt_chars": len(PROMPT),
            "page_bytes": page_file.stat().st_size,
            "weights_b64_bytes": sum(len(t["b64"]) for t in data["weights"].values()),
            "precision": data["precision"]["dtype"],
            "explain_html_seconds": round(write_seconds, 1),
            "explain_said": wrote.stdout.strip(),
            **summary(results, model, half_rounded(model), data["precision"]["max_logit_change"]),
            "rounds": args.rounds,
            "machine": machine(),
        }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
