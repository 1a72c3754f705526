"""Every MLP neuron described: how often it fires, where, what it writes, and what losing it costs.

A neuron is one of the 4·C values after the GELU, the hook point `blocks.L.mlp.post` (B, T, 4C).
Each is measured on POSITIONS (8,192) validation positions: evenly spaced windows of block_size
characters (the split the checkpoint was trained beside, tinygpt.explain.validation), WINDOWS of 64
at configs/cpu.yaml's block, fewer and longer at a larger block (32 of 256 at shakespeare_char's).
Positions, not windows, are what the numbers' precision needs (the standard errors below), and the
forward and backward pass costs in proportion to them:

    fires      where its activation is above FIRING (a quarter) of its largest on those positions.
               Not "above 0": GELU is positive wherever its input is, so a neuron is "on" at about
               half the positions of an untrained model and, once trained, still at many positions
               with values too small to move anything; a share of its own largest keeps the places
               it stands out and is the same rule for a neuron of any scale.
    density    the share of the positions where it fires (its standard error at 8,192 positions:
               at most 0.6 percentage points, 0.1 at a density of 1%, positions taken as independent)
    contexts   its CONTEXTS strongest activations, no two sharing a character
               (explanations.top_contexts_many), each the window as the model read it: the
               characters up to the firing one, no more than block_size of them, then those that
               follow in the window
    effect     what one unit of it adds to each character's logit directly: its output weights
               c_proj.weight[:, n] centred (ln_f subtracts the mean), times the mean of 1/σ of ln_f
               over the validation positions and ln_f's gain, through the unembedding. Per unit of
               activation; it promotes the characters at the top and suppresses those at the bottom.
               The idea is attribution.py's direct path with ln_f's scale averaged, not held per position.
    cost       what switching it off costs: the rise of the mean validation loss when its activation
               is replaced by its mean (mean ablation: a neuron that is slightly negative almost
               everywhere would, set to 0, shift every position). Estimated to first order from one
               backward pass for every neuron at once, Σ_p (mean − a_p)·∂L/∂a_p, since measuring
               2,048 ablations takes 2,048 forward passes; the one-neuron view also measures it.
    words      its best description (explanations.explain_many), with precision and recall.

The whole result is kept beside the checkpoint, one file per layer in the run's `cache/` folder
(beside the head scores), written atomically and keyed by a digest of the weights, the vocabulary,
the windows and these settings: a file whose key differs, or that cannot be read, is computed
again, never trusted.

The page lists only each layer's `listed` costliest neurons. It reads a layer's whole file when
`inspect --neurons` made one; else every neuron's cost is measured (that takes the pass over the
positions anyway) but only the listed ones are described (words and contexts: most of the cost at
10M parameters, BENCHMARKS.md's issue 38). Such a partial layer is kept too, so that the page made
again finds it, under a key whose settings hold `listed`: it is never read as a whole layer. Like any
other file of the same checkpoint and layer it replaces a whole layer's file whose key no longer
matches, and a whole layer's file, written later, replaces it (the page then reads the whole layer).
"""

import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from tinygpt.data.corpus import validation_windows, windows_for
from tinygpt.errors import UserError
from tinygpt.explain.explanations import explain_many, top_contexts_many
from tinygpt.explain.glyphs import glyph, pad
from tinygpt.explain.heads import loss
from tinygpt.explain.trace import chosen
from tinygpt.files.atomic import write_atomic
from tinygpt.files.integrity import digest
from tinygpt.model import GPT

POSITIONS = 8192  # validation positions scored: WINDOWS windows of 64, or fewer longer ones
WINDOWS = 128  # validation windows at most, block_size characters each
FIRING = 0.25  # a neuron fires above this share of its largest activation
CONTEXTS = 8  # strongest activations kept per neuron
WORDS = 3  # descriptions kept per neuron
SHOWN = 6  # characters shown promoted and suppressed
BEFORE, AFTER = 30, 10  # characters shown before a firing character (the model may have read more) and after
BATCH = 16  # windows per forward and backward pass
LN_EPS = 1e-5  # model.LayerNorm's epsilon
CACHE_VERSION = 2  # bumped when what a cache file holds, or how it is computed, changes (2: JSON notes)
SETTINGS = {"positions": POSITIONS, "windows": WINDOWS, "firing": FIRING, "contexts": CONTEXTS}
SETTINGS |= {"words": WORDS, "after": AFTER}


@dataclass
class Context:
    """One of a neuron's strongest activations, as the model computed it."""

    seen: str  # what the model read: the window up to and including the firing character
    after: str  # the characters that follow it in the window
    value: float  # the neuron's activation at the last character of `seen`


@dataclass
class Neuron:
    """One MLP neuron: where it fires, what it writes, what losing it costs, in words."""

    layer: int
    neuron: int
    density: float  # share of the validation positions where it fires
    largest: float  # its largest activation there (it fires above FIRING × this)
    mean: float  # its mean activation (what mean ablation puts in its place)
    cost: float  # validation loss rise with it mean-ablated, first-order estimate, nats
    promotes: list[tuple[str, float]]  # characters whose logits it raises most, per unit of activation
    suppresses: list[tuple[str, float]]  # … and lowers most
    explanations: list[dict]  # {words, precision, recall}, best first (none if it never fires)
    contexts: list[Context]
    measured: float | None = field(default=None)  # the cost measured by a forward pass (one neuron's view)

    @property
    def name(self) -> str:
        return f"{self.layer}.{self.neuron}"

    @property
    def words(self) -> str:
        """The best description on one line, with its precision and recall."""
        if not self.explanations:
            return "never fires"
        best = self.explanations[0]
        return f"{best['words']} (precision {best['precision']:.0%}, recall {best['recall']:.0%})"

    def as_dict(self) -> dict:
        """As plain data: dataclasses.asdict's result without its deep copies (seconds for 9,216 neurons)."""
        return {**vars(self), "contexts": [dict(vars(c)) for c in self.contexts]}


@dataclass
class Neurons:
    """Every neuron of the chosen layers, and what they were measured on."""

    neurons: list[Neuron]  # layer by layer, each layer's by neuron index (its listed ones, when partial)
    effects: dict[int, torch.Tensor]  # layer -> (4C, vocab): each neuron's direct effect on the logits
    positions: int  # validation positions measured
    loss: float  # the validation loss on them, with every neuron on
    inv_sigma: float  # the mean of 1/σ of ln_f over them


@dataclass
class Pass:
    """What one forward and backward pass over the windows gives, for the layers asked."""

    acts: dict[int, torch.Tensor]  # layer -> (N, 4C) activations, N = windows × block_size
    grad_sum: dict[int, torch.Tensor]  # layer -> (4C,) Σ_p ∂L/∂a_p
    grad_dot: dict[int, torch.Tensor]  # layer -> (4C,) Σ_p a_p·∂L/∂a_p
    inv_sigma: float
    loss: float


def scoring_windows(val: torch.Tensor, block_size: int) -> torch.Tensor:
    """The validation windows neurons are measured on: (N, T + 1), POSITIONS positions' worth, at most
    WINDOWS of them (or all there are)."""
    return validation_windows(val, block_size, windows_for(POSITIONS, block_size, WINDOWS))


def forward_backward(model: GPT, windows: torch.Tensor, layers: list[int], progress: bool) -> Pass:
    """Run windows (N, T + 1) through the model in batches: each layer's neurons, the gradient of the
    mean loss with respect to them, ln_f's mean 1/σ and the loss."""
    model.eval()
    last = f"blocks.{model.config.n_layer - 1}.resid_post"
    names = [f"blocks.{layer}.mlp.post" for layer in layers]
    total = windows[:, 1:].numel()
    acts = {layer: [] for layer in layers}
    grad_sum = {layer: 0.0 for layer in layers}
    grad_dot = {layer: 0.0 for layer in layers}
    inv_sigma, loss_sum = 0.0, 0.0
    for batch in tqdm(windows.split(BATCH), desc="neurons: forward and backward", disable=not progress):
        logits, found = model.run_with_cache(batch[:, :-1], [*names, last])
        summed = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten(), reduction="sum")
        grads = torch.autograd.grad(summed / total, [found[n] for n in names])
        for layer, name, grad in zip(layers, names, grads, strict=True):
            a = found[name].detach().flatten(0, 1)  # (B·T, 4C)
            g = grad.flatten(0, 1)  # (B·T, 4C)
            acts[layer].append(a)
            grad_sum[layer] = grad_sum[layer] + g.sum(0).double()  # a batch's sums in float32, the
            grad_dot[layer] = grad_dot[layer] + (a * g).sum(0).double()  # total over batches in float64
        stream = found[last].detach().double()  # (B, T, C)
        inv_sigma += (stream.var(dim=-1, unbiased=False) + LN_EPS).rsqrt().sum().item()
        loss_sum += summed.item()
    stacked = {layer: torch.cat(chunks) for layer, chunks in acts.items()}
    return Pass(stacked, grad_sum, grad_dot, inv_sigma / total, loss_sum / total)


def direct_effects(model: GPT, layer: int, inv_sigma: float) -> torch.Tensor:
    """Each neuron's direct effect on the logits per unit of activation: (4C, vocab)."""
    w = model.h[layer].mlp.c_proj.weight.detach().double()  # (C, 4C): column n is neuron n's output
    centred = w - w.mean(dim=0, keepdim=True)  # ln_f subtracts the mean over C
    read = inv_sigma * model.ln_f.weight.detach().double()  # (C,): ln_f's mean scale times its gain
    return ((centred * read[:, None]).T @ model.lm_head.weight.detach().double().T).float()  # (4C, vocab)


def layer_neurons(
    chars: list[str],
    windows: torch.Tensor,
    found: Pass,
    layer: int,
    effects: torch.Tensor,
    listed: int | None,
) -> list[Neuron]:
    """Every neuron of one layer, from a pass over the windows (N, T + 1) and its direct effects (4C, vocab);
    with `listed`, only its `listed` costliest (by_cost's order), each described as in the whole layer."""
    acts = found.acts[layer]  # (N, 4C)
    largest, mean = acts.amax(dim=0), acts.mean(dim=0)  # (4C,); amax: max(dim=0) also finds where, slowly
    thresholds = torch.where(largest > 0, FIRING * largest, torch.full_like(largest, float("inf")))
    density = (acts > thresholds).double().mean(dim=0)  # (4C,)
    cost = (mean.double() * found.grad_sum[layer] - found.grad_dot[layer]).float()  # (4C,): Σ (μ − a)·g
    costliest = cost.argsort(descending=True, stable=True)[:listed]  # ties by index, as by_cost
    chosen = sorted(costliest.tolist())  # (U,): by neuron index, every neuron when listed is None
    effect = effects[chosen]  # (U, vocab)
    inputs = windows[:, :-1]
    text = "".join(chars[i] for i in inputs.flatten().tolist())
    words = explain_many(text, acts[:, chosen].T, thresholds[chosen], WORDS)
    contexts = contexts_of(text, acts[:, chosen].T, windows, chars)
    promotes, suppresses = extremes(effect, chars, 1), extremes(effect, chars, -1)
    neurons = []
    for u, n in enumerate(chosen):
        neurons.append(
            Neuron(
                layer, n, float(density[n]), float(largest[n]), float(mean[n]), float(cost[n]),
                promotes[u], suppresses[u],
                [{"words": e.words, "precision": e.precision, "recall": e.recall} for e in words[u]],
                contexts[u],
            )
        )  # fmt: skip
    return neurons


def extremes(effect: torch.Tensor, chars: list[str], sign: int) -> list[list[tuple[str, float]]]:
    """Per neuron of effect (4C, vocab), the SHOWN characters whose logits it raises most (sign 1) or
    lowers most (sign -1), with the change per unit of activation."""
    top = (sign * effect).topk(min(SHOWN, len(chars)), dim=1)
    return [
        [(chars[i], round(sign * v, 4)) for i, v in zip(ids, values, strict=True)]
        for ids, values in zip(top.indices.tolist(), top.values.tolist(), strict=True)
    ]


def contexts_of(
    text: str, acts: torch.Tensor, windows: torch.Tensor, chars: list[str]
) -> list[list[Context]]:
    """Each neuron's strongest activations, acts (U, N) on the windows' inputs (text, N characters), each
    as the model read it: its window up to the firing character, then the rest of the window."""
    T = windows.size(1) - 1
    found = []
    for tops in top_contexts_many(text, acts, CONTEXTS, before=BEFORE, after=AFTER):
        mine = []
        for top in tops:
            row, at = divmod(top.position, T)
            ids = windows[row].tolist()
            seen = "".join(chars[i] for i in ids[: at + 1])
            after = "".join(chars[i] for i in ids[at + 1 : at + 1 + AFTER])
            mine.append(Context(seen, after, round(top.value, 6)))
        found.append(mine)
    return found


def cache_file(checkpoint: Path, key: str, layer: int) -> Path:
    """Where one layer's neurons are kept, beside the checkpoint."""
    return checkpoint.parent / "cache" / f"neurons.{checkpoint.stem}.{key[:16]}.layer{layer}.pt"


def measured_on(model: GPT, chars: list[str], windows: torch.Tensor) -> str:
    """A digest of what every layer's neurons are measured on: the weights, vocabulary and windows."""
    weights = {name: t.detach() for name, t in model.state_dict().items()}
    return digest({"weights": weights, "chars": chars, "windows": windows})


def cache_key(measured: str, layer: int, listed: int | None = None) -> str:
    """A digest of everything a layer's neurons depend on: what they are measured on (measured_on), the
    settings, and `listed`, for a layer described only in its listed costliest."""
    settings = {**SETTINGS, "version": CACHE_VERSION, "layer": layer}
    if listed is not None:
        settings["listed"] = listed
    return digest({"measured": measured, "settings": settings})


def read_cache(path: Path, key: str) -> tuple[list[Neuron], torch.Tensor, dict] | None:
    """A layer's neurons from its cache file, if the file is whole and its key is `key`; else None."""
    try:
        kept = torch.load(path, map_location="cpu", weights_only=True)
        if kept["key"] != key:
            return None
        neurons = [
            Neuron(
                **{**n, "contexts": [Context(**c) for c in n["contexts"]]},
            )
            for n in json.loads(kept["neurons"])
        ]
        for n in neurons:  # pairs come back from the file as lists
            n.promotes, n.suppresses = [tuple(p) for p in n.promotes], [tuple(p) for p in n.suppresses]
        return neurons, kept["effect"], kept["totals"]
    except Exception:  # absent, damaged, from another version: computed again
        return None


def write_cache(path: Path, key: str, neurons: list[Neuron], effect: torch.Tensor, totals: dict) -> None:
    """Keep a layer's neurons at path, whole or not at all; a directory that cannot be written is no error."""
    data = io.BytesIO()
    notes = json.dumps([n.as_dict() for n in neurons])  # one text: the safe loader reads many objects slowly
    kept = {"key": key, "neurons": notes, "effect": effect, "totals": totals}
    torch.save(kept, data)
    try:
        path.parent.mkdir(exist_ok=True)
        write_atomic(path, data.getbuffer())
        for stale in path.parent.glob(f"{path.name.split('.')[0]}.*.{path.name.split('.')[-2]}.pt"):
            if stale != path:  # the same checkpoint's and layer's, for other weights or settings
                stale.unlink(missing_ok=True)
    except OSError:
        pass


def every_neuron(
    model: GPT,
    chars: list[str],
    val: torch.Tensor,
    checkpoint: Path,
    layers: list[int],
    progress: bool = False,
    listed: int | None = None,
) -> Neurons:
    """The neurons of `layers`, from their cache files where those match, else measured (and kept). With
    `listed` (the page), a layer without a whole file is described only in its `listed` costliest."""
    windows = scoring_windows(val, model.config.block_size)
    measured = measured_on(model, chars, windows)
    kept = {layer: cached(measured, checkpoint, layer, listed) for layer in layers}
    missing = [layer for layer in layers if kept[layer] is None]
    if missing:
        found = forward_backward(model, windows, missing, progress)
        totals = {"positions": windows[:, 1:].numel(), "loss": found.loss, "inv_sigma": found.inv_sigma}
        for layer in tqdm(missing, desc="neurons: in words", disable=not progress):
            effect = direct_effects(model, layer, found.inv_sigma)  # (4C, vocab)
            neurons = layer_neurons(chars, windows, found, layer, effect, listed)
            key = cache_key(measured, layer, listed)
            write_cache(cache_file(checkpoint, key, layer), key, neurons, effect, totals)
            kept[layer] = (neurons, effect, totals)
    totals = kept[layers[0]][2]
    return Neurons(
        [n for layer in layers for n in kept[layer][0]],
        {layer: kept[layer][1] for layer in layers},
        totals["positions"],
        totals["loss"],
        totals["inv_sigma"],
    )


def cached(
    measured: str, checkpoint: Path, layer: int, listed: int | None
) -> tuple[list[Neuron], torch.Tensor, dict] | None:
    """A layer's kept neurons: its whole file, else (with `listed`) its file of the listed costliest."""
    for kind in dict.fromkeys([None, listed]):
        key = cache_key(measured, layer, kind)
        kept = read_cache(cache_file(checkpoint, key, layer), key)
        if kept is not None:
            return kept
    return None


def measured_cost(model: GPT, val: torch.Tensor, neuron: Neuron) -> float:
    """The validation loss rise on the scoring windows with the neuron's activation set to its mean,
    measured by running the model so (the list's cost is its first-order estimate)."""
    windows = scoring_windows(val, model.config.block_size)

    def off(post: torch.Tensor, name: str) -> torch.Tensor:
        post = post.clone()  # (B, T, 4C)
        post[..., neuron.neuron] = neuron.mean
        return post

    with torch.no_grad():
        on = sum(loss(model, w) * w[:, 1:].numel() for w in windows.split(BATCH))
        with model.hooks({f"blocks.{neuron.layer}.mlp.post": off}):
            without = sum(loss(model, w) * w[:, 1:].numel() for w in windows.split(BATCH))
    return (without - on) / windows[:, 1:].numel()


def neuron_index(neuron: int, model: GPT) -> int:
    """--neuron checked against the neurons a layer has (4·n_embd)."""
    count = 4 * model.config.n_embd
    if not 0 <= neuron < count:
        raise UserError(f"--neuron {neuron} does not exist: each layer has {count} neurons (0 … {count - 1})")
    return neuron


def layers_of(layer: int | None, model: GPT) -> list[int]:
    """--layer checked (every layer when None); an attention-only model has no neurons to describe."""
    if not model.config.mlp:
        raise UserError(
            "this model is attention-only (model.mlp: false): its blocks have no MLP, so it has no neurons "
            "to describe; --heads, --attribution and --patch read it"
        )
    return chosen(layer, model.config.n_layer, "layer")


ROWS = 20  # neurons listed per layer in the terminal, the costliest first (--json lists all)


def by_cost(found: Neurons, layer: int) -> list[Neuron]:
    """A layer's neurons, the costliest to switch off first."""
    return sorted((n for n in found.neurons if n.layer == layer), key=lambda n: -n.cost)


def marked(context: Context) -> str:
    """A context on one line: up to BEFORE characters read before, the firing one in ⟦ ⟧, what follows."""
    before = context.seen[:-1]
    cut = "…" if len(before) > BEFORE else ""
    shown = "".join(glyph(c) for c in before[-BEFORE:])
    return f"{cut}{shown}⟦{glyph(context.seen[-1])}⟧{''.join(glyph(c) for c in context.after)}"


def characters(pairs: list[tuple[str, float]]) -> str:
    return " ".join(glyph(c) for c, _ in pairs)


def neurons_text(found: Neurons, rows: int = ROWS) -> str:
    """The neurons as a terminal list: per layer, the `rows` costliest, each with density, promoted
    characters and words."""
    lines = []
    for layer in sorted(found.effects):
        mine = by_cost(found, layer)
        lines.append(
            f"layer {layer}: the {min(rows, len(mine))} of {len(mine)} neurons that cost most to switch off"
        )
        lines.append(f"{'neuron':>7} {'cost':>8} {'density':>7}  {'promotes':<{2 * SHOWN}}  in words")
        for n in mine[:rows]:
            promoted = pad(characters(n.promotes), 2 * SHOWN)
            lines.append(f"{n.name:>7} {n.cost:>+8.4f} {n.density:>7.1%}  {promoted}  {n.words}")
        lines.append("")
    lines += [
        f"measured on {found.positions:,} validation positions (validation loss {found.loss:.4f})",
        "cost: the validation loss rise, in nats, with the neuron's mean in place of its activation, "
        "estimated to first order (--neuron measures it)",
        f"density: where it fires, above {FIRING:g} of its largest activation; promotes: the characters "
        "whose logits it raises most, directly",
        "--json lists every neuron; --layer L --neuron N shows one",
    ]
    return "\n".join(lines)


def neuron_text(found: Neurons, n: Neuron) -> str:
    """One neuron in detail: its firing, its cost estimated and measured, its words, its direct effect
    and its strongest activations with the firing character marked."""
    lines = [
        f"neuron {n.name} (blocks.{n.layer}.mlp.post[..., {n.neuron}]) "
        f"on {found.positions:,} validation positions",
        f"fires above {FIRING:g} × its largest activation ({n.largest:.4f}) at {n.density:.2%} of them; "
        f"its mean activation {n.mean:+.4f}",
        f"switching it off (its mean in its place) costs {n.measured:+.5f} nats measured, "
        f"{n.cost:+.5f} estimated to first order",
        "in words: " + (n.words if n.explanations else "never fires"),
    ]
    lines += [
        f"      or: {e['words']} (precision {e['precision']:.0%}, recall {e['recall']:.0%})"
        for e in n.explanations[1:]
    ]
    lines.append("direct effect on the next character's logits, per unit of activation:")
    lines.append("  promotes    " + "  ".join(f"{glyph(c)} {v:+.3f}" for c, v in n.promotes))
    lines.append("  suppresses  " + "  ".join(f"{glyph(c)} {v:+.3f}" for c, v in n.suppresses))
    lines.append("strongest activations (⟦ ⟧ marks the character; the model read the text up to it):")
    lines += [f"  {c.value:>8.4f}  {marked(c)}" for c in n.contexts]
    return "\n".join(lines)


def neurons_json(found: Neurons, neuron: Neuron | None = None) -> str:
    """`inspect --neurons --json`: what they were measured on, and every neuron (or the one chosen)."""
    head = {"positions": found.positions, "loss": found.loss, "inv_sigma": found.inv_sigma, "firing": FIRING}
    if neuron is not None:
        return json.dumps({**head, "neuron": neuron.as_dict()}, indent=2, ensure_ascii=False)
    return json.dumps({**head, "neurons": [n.as_dict() for n in found.neurons]}, indent=2, ensure_ascii=False)
