"""Each feature of a dictionary described, once, from validation text: what a reader browses.

For each latent, on the first DESCRIBED characters of the validation windows:

    density       its share of positions on which it fires (on all the evaluated positions)
    firings       how many of the described characters it fires on
    histogram     BINS counts of its nonzero activations, from 0 to its largest (`max`)
    contexts      its CONTEXTS strongest activations, each with the text before and after it
                  (tinygpt.explain.explanations.top_contexts: one per window) and its activation at
                  every character of that text (shading)
    promoted      the characters whose logits its decoder row raises most, per unit of activation,
    suppressed    and lowers most: the row, centred as ln_f centres the stream, divided by the last
                  stream's mean standard deviation (ln_f's average scale), times ln_f's weight, read
                  by the unembedding. The direct path only: what later layers make of it is not in it.
    explanations  the best one-line descriptions of where it fires, with precision and recall
                  (tinygpt.explain.explanations.explain)

All of it plain data (lists, dicts, text, numbers), so that a feature file keeps it.
"""

import torch
from tqdm import tqdm

from tinygpt.explain.dictionary import TopKDictionary
from tinygpt.explain.explanations import Context, explain_many, top_contexts_many
from tinygpt.explain.feature_quality import Evaluation
from tinygpt.model import GPT

DESCRIBED = 32_768  # characters of validation text the descriptions are found on
BINS = 10
CONTEXTS = 5
SHADING_DIGITS = 4  # decimals of the activations kept along each context (the page shades by them)
CHARACTERS = 5  # promoted and suppressed characters kept
CHUNK = 128  # latents described together (explanations.explain_many): (CHUNK, N) floats at a time
EXPLANATIONS = 3
FEW = 10  # firings below which a description's precision and recall say little


def logit_effects(model: GPT, dictionary: TopKDictionary, stream_scale: float) -> torch.Tensor:
    """(n, vocab): how much one unit of each latent raises each character's logit, on the direct path."""
    rows = dictionary.W_dec.detach().float().cpu() / dictionary.input_scale  # (n, d): in the layer's units
    centred = rows - rows.mean(dim=1, keepdim=True)  # (n, d): ln_f subtracts each vector's mean
    scaled = centred / stream_scale * model.ln_f.weight.detach().float().cpu()  # (n, d)
    return scaled @ model.lm_head.weight.detach().float().cpu().t()  # (n, vocab)


def columns(evaluation: Evaluation, length: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The firings of the first `length` positions grouped by latent, as (rows, values, bounds (n + 1,)):
    latent f fires at positions rows[bounds[f]:bounds[f+1]], with values[bounds[f]:bounds[f+1]]."""
    k = evaluation.values.size(1)
    values = evaluation.values[:length].flatten()  # (length·k,)
    latents = evaluation.indices[:length].flatten()
    rows = torch.arange(length).repeat_interleave(k)
    fired = values > 0
    values, latents, rows = values[fired], latents[fired], rows[fired]
    order = latents.argsort(stable=True)
    bounds = torch.searchsorted(latents[order], torch.arange(n + 1))  # (n + 1,)
    return rows[order], values[order], bounds


def describe_features(
    model: GPT,
    dictionary: TopKDictionary,
    evaluation: Evaluation,
    text: str,
    chars: list[str],
    progress: bool = True,
    only: int | None = None,
) -> list[dict]:
    """One note per latent, in latent order (the module's docstring lists what each holds).

    text: the characters of the evaluated positions, in order; the first DESCRIBED are used.
    only: describe this many latents, evenly spread over those that fire (the control's sample), not all.
    """
    text = text[:DESCRIBED]
    n = dictionary.W_dec.size(0)
    rows, values, bounds = columns(evaluation, len(text), n)
    effects = logit_effects(model, dictionary, evaluation.stream_scale)  # (n, vocab)
    chosen = range(n)
    if only is not None:
        live = (bounds[1:] > bounds[:-1]).nonzero().squeeze(1)  # latents firing on the text
        chosen = live[torch.linspace(0, max(len(live) - 1, 0), min(only, len(live))).long()].tolist()
    notes = []
    for start in tqdm(
        range(0, len(chosen), CHUNK), desc="describing features", unit="chunk", disable=not progress
    ):
        batch = list(chosen[start : start + CHUNK])
        acts = torch.zeros(len(batch), len(text))  # (U, N): each latent's activation at each character
        for u, f in enumerate(batch):
            acts[u, rows[bounds[f] : bounds[f + 1]]] = values[bounds[f] : bounds[f + 1]]
        described = explain_many(text, acts, 0.0, EXPLANATIONS)  # the text's candidates built once
        strongest = top_contexts_many(text, acts, CONTEXTS)
        for u, (f, found) in enumerate(zip(batch, described, strict=True)):
            note = {"feature": f, "density": float(evaluation.densities[f])}
            note |= activation_notes(acts[u], text, strongest[u])
            note |= character_notes(effects[f], chars)
            note["explanations"] = [
                {"words": e.words, "precision": e.precision, "recall": e.recall} for e in found
            ]
            notes.append(note)
    return notes


def activation_notes(acts: torch.Tensor, text: str, strongest: list[Context]) -> dict:
    """The histogram of a latent's nonzero activations (N,) on text, its largest, and its top contexts
    (strongest: top_contexts of acts on text)."""
    fired = acts[acts > 0]
    top = float(fired.max()) if fired.numel() else 0.0
    histogram = torch.histc(fired, bins=BINS, min=0.0, max=top).long().tolist() if top > 0 else [0] * BINS
    contexts = [
        {"text": c.text, "index": c.index, "value": c.value, "shading": shading(acts, c)}
        for c in strongest
        if c.value > 0
    ]
    return {"firings": fired.numel(), "max": top, "histogram": histogram, "contexts": contexts}


def shading(acts: torch.Tensor, context: Context) -> list[float]:
    """The latent's activation at every character of a context (acts (N,) over the whole text)."""
    start = context.position - context.index
    return [round(v, SHADING_DIGITS) for v in acts[start : start + len(context.text)].tolist()]


def character_notes(effect: torch.Tensor, chars: list[str]) -> dict:
    """The characters a latent's logit effect (vocab,) raises most and lowers most, with the amounts."""
    count = min(CHARACTERS, effect.numel())
    up, down = effect.topk(count), (-effect).topk(count)
    promoted = zip(up.indices.tolist(), up.values.tolist(), strict=True)
    suppressed = zip(down.indices.tolist(), down.values.tolist(), strict=True)
    return {
        "promoted": [[chars[i], v] for i, v in promoted],
        "suppressed": [[chars[i], -v] for i, v in suppressed],
    }


def best_f1(note: dict) -> float:
    """The F1 of a note's best description (0 for a latent that never fired on the text)."""
    if not note.get("explanations"):
        return 0.0
    best = note["explanations"][0]
    total = best["precision"] + best["recall"]
    return 2 * best["precision"] * best["recall"] / total if total > 0 else 0.0


def ranked(notes: list[dict]) -> list[dict]:
    """The notes best-described first: by their best description's F1, then density; a feature firing on
    fewer than FEW characters after the rest (one firing is described perfectly by anything that holds
    there alone), and silent ones last."""
    return sorted(notes, key=lambda note: (note.get("firings", 0) < FEW, -best_f1(note), -note["density"]))


def description_precision(notes: list[dict]) -> dict:
    """Over the described latents that fired on FEW characters or more: their best description's mean
    precision and F1, and the share whose best description has precision ≥ 0.5 (what the control is
    compared on)."""
    described = [note for note in notes if note.get("explanations") and note["firings"] >= FEW]
    if not described:
        return {"described": 0, "precision": float("nan"), "f1": float("nan"), "precise_share": float("nan")}
    precisions = [note["explanations"][0]["precision"] for note in described]
    return {
        "described": len(described),
        "precision": sum(precisions) / len(described),
        "f1": sum(map(best_f1, described)) / len(described),
        "precise_share": sum(p >= 0.5 for p in precisions) / len(described),
    }
