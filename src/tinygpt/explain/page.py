"""The interactive explainer page: one self-contained HTML file, built from a checkpoint and a prompt.

The page (explain/assets/explainer.html and .css, and the JavaScript modules beside them joined into
one script by page_script, all inlined) opens with attention on
a worked example small enough to read, then shows the prompt's tokens with their top-5
next characters and the logit lens, a layer × head grid of attention heatmaps labelled
with each head's role (explain/heads.py; a click on the label switches the head off),
the arithmetic of any clicked row and, behind a toggle, its backward pass, a PCA map of
the character embeddings and the run's loss curves; with the run's timeline.jsonl, a
slider over its training steps (assets/timeline.js and .css, tinygpt.explain.timeline).
For models up to LIVE_LIMIT parameters it carries the weights and runs the forward pass
itself, so any typed prompt updates everything: up to PACK_LIMIT in float32, on the page's own thread;
above it in float16, in a Web Worker, so that the page stays responsive while a large model reads a
prompt. Larger models carry the one prompt's trace, computed here. For the prompt the page is written
for, the backward panel's step 2 (the gradient reaching each head's output) and step 7 (what one
gradient step on a head's q, k, v weights does to its attention and the loss, for every head and
position) are computed here; the page works out steps 3–6 itself. Each head's mean output over validation
text, for switching heads off in mean mode, is computed here too.

Tensors travel as base64 of little-endian float32 bytes, so the page reads the
very numbers PyTorch holds; a large model's weights as float16 bytes, half the size, and the page says
how far rounding them moves the prompt's logits.
"""

import base64
import copy
import ctypes
import html
import json
import re
import sys
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

import torch
from tqdm import tqdm

from tinygpt.errors import UserError
from tinygpt.explain.backward import STEP_LR, check_lr, head_output_gradients, step_effects
from tinygpt.explain.circuits import page_circuits
from tinygpt.explain.inspected import Inspected
from tinygpt.explain.lens import logit_lens
from tinygpt.explain.page_sections import page_sections
from tinygpt.explain.pca import principal_components
from tinygpt.explain.roles import WORDS
from tinygpt.explain.timeline import page_timeline
from tinygpt.explain.trace import Trace, focus, trace_prompt
from tinygpt.files.atomic import write_atomic
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.files.metrics import read_metrics
from tinygpt.model import GPT
from tinygpt.threads import threads_for
from tinygpt.tokenizer import prompt_ids

PACK_LIMIT = 1_000_000  # parameters up to which the weights travel in float32 and the page's own thread
# runs the model (cpu.yaml's 0.8M model among them); above it they travel in float16, half the bytes, and
# a Web Worker runs the model, whose pass over a prompt would otherwise freeze the page while it runs
PAGE_BUDGET = 30_000_000  # bytes: the largest page worth writing, to mail, keep or open on a phone
LIVE_LIMIT = 10_800_000  # parameters up to which the page carries the weights and runs the model itself:
# float16 in base64 is 8/3 bytes a parameter, 28.8 MB at this limit, all of PAGE_BUDGET but the rest of
# the page (the backward panel's data in float16 and the scripts, about 1 MB for a 64-character prompt
# at 6 × 384); it holds shakespeare_char's 10.75M (10.65M and the position embeddings). Beyond it the
# page outgrows the budget before a browser's memory (the page's and the worker's float32 copies of the
# weights, 4 bytes a parameter each) or its time (the forward pass grows with the parameters: several
# seconds at 10.75M, BENCHMARKS.md, "Issue 38: the page at 10.75M") would stop it


def tensor_data(t: torch.Tensor, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """A tensor as the page reads it: its shape and its float32 (or float16) bytes in base64."""
    flat = t.detach().to("cpu", dtype).flatten().clone()  # own storage, exactly numel values
    if sys.byteorder == "big":  # each value's bytes reversed
        flat = flat.view(torch.uint8).view(-1, flat.element_size()).flip(1).contiguous()
    raw = ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size())  # one copy, in C
    data = {"shape": list(t.shape), "b64": base64.b64encode(raw).decode("ascii")}
    return data if dtype == torch.float32 else {**data, "dtype": "float16"}


def model_weights(model: GPT, dtype: torch.dtype = torch.float32) -> dict[str, dict[str, Any]]:
    """Every parameter by its state_dict name; the LM head is the token embedding, sent once."""
    return {name: tensor_data(p, dtype) for name, p in model.named_parameters()}


def precision_data(model: GPT, ids: list[int], packed: bool) -> dict[str, Any]:
    """How the page carries the weights, and the most that rounding them to it moves one of the prompt's
    logits (T, vocab) from PyTorch's float32 ones: 0 for float32, measured for float16 (PACK_LIMIT)."""
    if not packed:
        return {"dtype": "float32", "max_logit_change": 0.0}
    x = torch.tensor([ids])  # (1, T), never empty (tinygpt.tokenizer.prompt_ids)
    with torch.no_grad():
        change = (half_rounded(model)(x)[0] - model(x)[0]).abs().max().item()
    return {"dtype": "float16", "max_logit_change": change}


def half_rounded(model: GPT) -> GPT:
    """A copy of the model with every weight rounded to float16 and back: what a packed page runs."""
    rounded = copy.deepcopy(model)  # the tied LM head stays tied
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.half().float())
            if not torch.isfinite(p).all():
                raise UserError("a weight is too large for float16 (65,504): the page cannot carry it")
    return rounded


def trace_data(trace: Trace, lens: torch.Tensor) -> dict[str, Any]:
    """A prompt's trace in the same layout the page's own forward pass produces, with its logit lens."""
    layer_keys = ("resid", "ln_1", "q", "k", "v", "weights", "heads", "contrib", "out")
    return {
        "ids": trace.ids,
        "tok_emb": tensor_data(trace.tok_emb),
        "pos_emb": tensor_data(trace.pos_emb),
        "layers": [{key: tensor_data(getattr(lt, key)) for key in layer_keys} for lt in trace.layers],
        "logits": tensor_data(trace.logits),
        "lens": tensor_data(lens),  # (n_layer, T, vocab)
    }


def roles_data(inspected: Inspected) -> dict[str, Any]:
    """Each head's role for the heatmaps' labels (from its report), or None and why not (the corpus is
    not at hand)."""
    try:
        heads = inspected.heads()
    except UserError as e:
        return {"roles": None, "roles_note": f"no head roles: {e}"}
    keep = ("layer", "head", "scores", "label", "entropy")
    return {"roles": [{k: getattr(r, k) for k in keep} for r in heads.reports], "roles_note": None}


def means_data(inspected: Inspected) -> dict[str, Any]:
    """Each layer's mean head outputs, as --ablate-mode mean uses them (n_layer, C), or None and why not."""
    try:
        means = inspected.means()
    except UserError as e:
        return {"means": None, "means_note": f"no mean ablation: {e}"}
    return {"means": tensor_data(torch.stack(means)), "means_note": None}


def circuits_data(inspected: Inspected) -> dict[str, Any]:
    """The circuit view's data (circuits.js): compositions, and each head described (when it can be)."""
    try:
        heads, note = inspected.heads(), None
    except UserError as e:
        heads, note = None, str(e)
    return {"circuits": page_circuits(inspected.model, heads, note)}


def backward_data(
    model: GPT, ids: list[int], lr: float, dtype: torch.dtype = torch.float32
) -> dict[str, Any]:
    """What the backward panel needs from Python: for steps 1–6 the gradient reaching every head's output,
    (T − 1, L, nh, hs), and step 7 (step_data). Without ids, none (the panel then says it has none)."""
    c = model.config
    if not ids:
        after, loss_after = torch.zeros(0, c.n_layer, c.n_head, 0), torch.zeros(0, c.n_layer, c.n_head)
        step = {"lr": lr, "after": tensor_data(after), "loss_after": tensor_data(loss_after)}
        return {"ids": [], "g": tensor_data(torch.zeros(0, c.n_layer, c.n_head, c.head_size)), "step": step}
    g = head_output_gradients(model, ids, computed_in(dtype))
    return {"ids": ids, "g": tensor_data(g, dtype), "step": step_data(model, ids, lr, dtype)}


def computed_in(dtype: torch.dtype) -> torch.dtype:
    """What the backward panel's numbers kept in dtype are computed in: float64 for float32, float32 for
    float16 (a packed page's: float32's error is far below what float16 keeps, in half the time)."""
    return torch.float64 if dtype == torch.float32 else torch.float32


def step_data(model: GPT, ids: list[int], lr: float, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Step 7 of the backward panel for every head and every position i < T − 1: the weights of row i
    after one plain gradient step of size lr on the head's q, k, v rows (zero beyond key i), and the
    loss at i after it, in `dtype` (computed_in's)."""
    c, T = model.config, len(ids)
    after = torch.zeros(max(T - 1, 0), c.n_layer, c.n_head, T, dtype=torch.float64)
    loss_after = torch.zeros(max(T - 1, 0), c.n_layer, c.n_head, dtype=torch.float64)
    heads = [(layer, head) for layer in range(c.n_layer) for head in range(c.n_head)]
    positions = range(T - 2, -1, -1)  # the longest first: the thread counts are measured on the costliest
    with threads_for("auto", "threads", model.wte.weight.device) as threads:
        for step in step_effects(model, ids, lr, threads.each(positions), heads, computed_in(dtype)):
            after[step.i, step.layer, step.head, : step.i + 1] = step.after
            loss_after[step.i, step.layer, step.head] = step.loss_after
    return {"lr": lr, "after": tensor_data(after, dtype), "loss_after": tensor_data(loss_after, dtype)}


def loss_curves(run_dir: Path) -> list[dict[str, float]] | None:
    """(step, train_loss, val_loss) of each evaluation in run_dir/metrics.jsonl; None when absent."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return None
    return [{k: float(entry[k]) for k in ("step", "train_loss", "val_loss")} for entry in read_metrics(path)]


VIEWS = {  # the data each view draws, beyond what every view carries (the prompt, its trace or the
    # weights, the embeddings' map, the loss curves); a part not built is null, as for a run without it
    "page": ("roles", "means", "backward", "timeline", "circuits", "sections"),  # explain --html: all of it
    "grid": ("roles", "means"),
    "lens": (),
    "walkthrough": ("backward",),  # the backward pass is a toggle away
    "backward": ("backward",),
    "circuits": ("circuits",),
    "timeline": ("timeline",),
    "attribution": (),  # computed by the page from the weights it carries
    "neurons": ("sections",),
    "features": ("sections",),
}
EMPTY = dict.fromkeys(
    ("roles", "roles_note", "means", "means_note", "timeline", "circuits")
    + ("neurons", "neurons_note", "features", "features_note")
)


def running_data(model: GPT, ids: list[int], live: bool, packed: bool) -> dict[str, Any]:
    """How the page runs the model: its weights (float16 when packed, for the Web Worker) up to LIVE_LIMIT,
    above it the prompt's trace alone."""
    return {
        "worker": packed,
        "precision": precision_data(model, ids, packed),
        "weights": model_weights(model, torch.float16 if packed else torch.float32) if live else None,
        "trace": None if live else trace_data(trace_prompt(model, ids), logit_lens(model, ids)),
    }


def page_data(
    checkpoint: str | Path,
    prompt: str,
    layer: int = 0,
    head: int = 0,
    token: int | None = None,
    live_limit: int = LIVE_LIMIT,
    steps: tqdm | None = None,
    lr: float = STEP_LR,
    loaded: Inspected | None = None,
    off: tuple[list[tuple[int, int]], str] | None = None,
    view: str = "page",
    pack_limit: int = PACK_LIMIT,
) -> dict[str, Any]:
    """What the page (or one view of it, VIEWS) shows, as JSON-ready data; `steps` (a bar of STEPS) says
    what it is doing; `loaded`: the checkpoint already read and its model built (tinygpt.load's), else
    read here; `off`: the heads the page starts with switched off, and how (zero or mean); `live_limit`
    and `pack_limit`: as LIVE_LIMIT and PACK_LIMIT."""
    steps = steps or tqdm(disable=True)
    path = Path(checkpoint)
    if loaded is None:
        saved = read_checkpoint(path)
        loaded = Inspected(path, saved, saved.build_model(path))
    saved, model = loaded.saved, loaded.model.eval()
    tokenizer, cfg = saved.tokenizer, model.config
    ids = prompt_ids(tokenizer, prompt, cfg.block_size)
    layer, head, token = focus(cfg, ids, layer, head, token)
    check_lr(lr)
    live = model.num_params() <= live_limit
    packed = live and model.num_params() > pack_limit  # float16 weights, run in a Web Worker
    parts = set(VIEWS[view]) | ({"means"} if off and off[1] == "mean" else set())
    data = {**EMPTY, "backward": backward_data(model, ids[:0], lr)}  # what a part not built leaves
    for part, what in PARTS.items():
        if part in parts:
            next_step(steps, what.format(T=len(ids), heads=cfg.n_layer * cfg.n_head))
            data.update(build_part(part, loaded, ids, lr, torch.float16 if packed else torch.float32))
    next_step(steps, "packing the weights" if live else "tracing the prompt")
    data.update(
        {
            "checkpoint": path.name,
            "run": path.parent.name,
            "params": model.num_params(),
            "live_limit": live_limit,
            "pack_limit": pack_limit,
            "config": {**vars(cfg), "head_size": cfg.head_size},
            "record": {k: v for k, v in saved.record.items() if isinstance(v, (int, float, str))},
            "vocab": tokenizer.chars,
            "prompt": tokenizer.decode(ids),
            "selection": {"layer": layer, "head": head, "token": token},
            **heads_off(off),
            **running_data(model, ids, live, packed),
            "role_words": WORDS,  # what each label means, said when a head's label is hovered over
            "pca": pca_data(model),
            **curves_data(path),
        }
    )
    next_step(steps, "writing the page")
    return data


PARTS = {  # each part a view may draw, and what the progress bar says while it is built
    "roles": "scoring each head's role and what switching it off costs",
    "means": "each head's mean output, for mean ablation",
    "backward": "the gradients for the backward panel, and a step per head and position for step 7",
    "timeline": "the timeline",
    "circuits": "the circuits",
    "sections": "the costliest neurons and the feature files",
}


def build_part(
    part: str, inspected: Inspected, ids: list[int], lr: float, dtype: torch.dtype
) -> dict[str, Any]:
    """One part of the page's data, by its name in PARTS; the backward panel's arrays in `dtype` (a large
    model's page carries them in float16, as its weights: at 6 × 384 and 64 characters, 0.8 MB less)."""
    if part == "roles":
        return roles_data(inspected)
    if part == "means":
        return means_data(inspected)
    if part == "backward":
        return {"backward": backward_data(inspected.model, ids, lr, dtype)}
    if part == "timeline":
        return {"timeline": page_timeline(inspected.path.parent)}  # the slider (assets/timeline.js)
    if part == "sections":  # neurons.js, features.js
        return page_sections(inspected.saved, inspected.model, inspected.path)
    return circuits_data(inspected)  # compositions and head descriptions (circuits.js)


def pca_data(model: GPT) -> dict[str, list]:
    """The character embeddings' map: each character's two coordinates, and each direction's share."""
    coords, share = principal_components(model.wte.weight)
    return {"coords": coords.tolist(), "share": share.tolist()}


def curves_data(path: Path) -> dict[str, Any]:
    """The run's loss curves from the metrics.jsonl beside the checkpoint, or a note saying why none."""
    metrics = loss_curves(path.parent)
    return {
        "metrics": metrics,
        "metrics_note": None if metrics is not None else f"no metrics.jsonl beside {path.name}",
    }


def heads_off(off: tuple[list[tuple[int, int]], str] | None) -> dict[str, Any]:
    """The heads the page starts with switched off, as it names them ("L.H"), and the mode."""
    return {
        "off": [f"{layer}.{head}" for layer, head in off[0]] if off else [],
        "mode": off[1] if off else "zero",
    }


STEPS = 9  # of writing the whole page, as next_step counts them: reading, the six PARTS, the weights
# or the trace, writing


def next_step(steps: tqdm, what: str) -> None:
    """The bar moves on one step and says what comes next."""
    steps.update()
    steps.set_description(what)


STYLES = ("explainer", "timeline", "circuits")  # the page's style sheets in assets/, inlined in this order


def render_page(data: dict[str, Any]) -> str:
    """The HTML file: the template with its style, script and data inlined."""
    assets = resources.files("tinygpt.explain") / "assets"
    template = Template((assets / "explainer.html").read_text(encoding="utf-8"))
    return template.substitute(
        title=html.escape(f"tinygpt explainer · {data['run']}/{data['checkpoint']}"),
        style="\n".join((assets / f"{name}.css").read_text(encoding="utf-8") for name in STYLES),
        script=page_script(),
        worker=page_script(WORKER_ENTRY) if data.get("worker") else "",  # text, run by no browser as it is
        data=script_json(data),
    )


SCRIPT_ENTRY = "main.js"  # the page's script: this module, after every module it imports (assets/*.js)
WORKER_ENTRY = "worker.js"  # the Web Worker's script, which the page starts from the text inlined with it
IMPORT = re.compile(r'^import (?:\{[^}]*\} from )?"\./([\w-]+\.js)";\n', re.MULTILINE)
EXPORT = re.compile(r"^export (?=function |const |let )", re.MULTILINE)


def page_script(entry: str = SCRIPT_ENTRY) -> str:
    """The page's JavaScript modules as one script, as a page opened from disk must have it (a browser
    loads no module into a file:// page): each module once, after the modules it imports, its import
    statements and export keywords taken out. The modules' top-level names are therefore distinct: a
    const or let declared twice makes the browser refuse the whole script, which the browser tests would
    see; a function declared twice would replace the first unseen, which test_page checks for."""
    assets = resources.files("tinygpt.explain") / "assets"
    sources: dict[str, str] = {}  # module -> its source, in the order they run

    def visit(name: str) -> None:
        if name in sources:
            return
        text = (assets / name).read_text(encoding="utf-8")
        sources[name] = text  # before its imports are visited, so that a circle of imports ends
        for imported in IMPORT.findall(text):
            visit(imported)
        sources[name] = sources.pop(name)  # moved after every module it imports

    visit(entry)
    return "\n".join(f"// {name}\n{EXPORT.sub('', IMPORT.sub('', text))}" for name, text in sources.items())


def script_json(data: Any) -> str:
    """JSON safe inside a <script> element: no '<', '>' or '&' can close it or start a comment."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


PAGE_NAME = "explain.html"  # where --html alone writes: beside the checkpoint, in its run directory


def write_page(
    checkpoint: str | Path,
    prompt: str,
    out: str | Path | None = None,
    layer: int = 0,
    head: int = 0,
    token: int | None = None,
    live_limit: int = LIVE_LIMIT,
    progress: bool = False,
    lr: float = STEP_LR,
    pack_limit: int = PACK_LIMIT,
) -> str:
    """Write the page to `out` (default: explain.html beside the checkpoint); returns what was written."""
    out = Path(checkpoint).parent / PAGE_NAME if out is None else Path(out)
    with tqdm(total=STEPS, desc="reading the checkpoint", disable=not progress, leave=False) as steps:
        data = page_data(checkpoint, prompt, layer, head, token, live_limit, steps, lr, pack_limit=pack_limit)
        try:
            write_atomic(out, render_page(data))
        except OSError as e:
            raise UserError(f"cannot write {out}: {e.strerror}") from None
        steps.update()
    size = out.stat().st_size
    where = " (float16 weights, run in a Web Worker)" if data["worker"] else ""
    how = (
        f"runs the model itself{where}: type any prompt"
        if data["weights"] is not None
        else f"shows this prompt only (the model has more than {live_limit:,} parameters)"
    )
    return f"wrote {out} ({size / 1e6:.1f} MB, {how}); open it in a browser"
