"""The data of the page's neurons and features sections (assets/neurons.js, assets/features.js).

    neurons    each layer's NEURONS costliest MLP neurons (tinygpt.explain.neurons, cached beside the
               checkpoint): cost, density, words, promoted and suppressed characters, strongest
               contexts. The costliest only: every neuron of the README's model (2,048, each with 8
               contexts) would add megabytes to a page that lists a screenful at a time.
    features   each feature file of the run (RUN/features/<site>.<layer>.pt, `tinygpt features RUN`)
               made for this checkpoint: its quality beside the control's, its FEATURES best-described
               features (feature_notes.ranked) with descriptions, density, histogram, promoted and
               suppressed characters, and their contexts with the feature's activation at every
               character (all of it from the file: no pass through the model).

Either is None with a note saying why when it cannot be had (no corpus at hand, no feature file).
"""

from pathlib import Path
from typing import Any

import torch

from tinygpt.errors import UserError
from tinygpt.explain import neurons as measuring
from tinygpt.explain.feature_notes import ranked
from tinygpt.explain.feature_text import QUALITY_ROWS, headline, quantity, summary
from tinygpt.explain.validation import corpus_of
from tinygpt.files.checkpoint import Checkpoint
from tinygpt.files.feature_file import FeatureFile, read_features
from tinygpt.model import GPT

NEURONS = 32  # neurons the page lists per layer, the costliest first
FEATURES = 64  # features the page lists per feature file, the best-described first


def page_sections(saved: Checkpoint, model: GPT, path: Path) -> dict[str, Any]:
    """The two sections' data and notes, as the page's data holds them."""
    neurons, neurons_note = neurons_data(saved, model, path)
    features, features_note = features_data(saved, path)
    return {
        "neurons": neurons,
        "neurons_note": neurons_note,
        "features": features,
        "features_note": features_note,
    }


def neurons_data(saved: Checkpoint, model: GPT, path: Path) -> tuple[dict | None, str | None]:
    """Each layer's NEURONS costliest neurons, as the neurons section lists them, or None and why not."""
    if not model.config.mlp:
        return None, "no neurons: this model is attention-only (model.mlp: false)"
    if model.wte.weight.device.type != "cpu":
        return None, "no neurons: the page measures them on the CPU"
    try:
        val = corpus_of(saved, model.config.block_size, path).val
    except UserError as e:
        return None, f"no neurons: {e}"
    layers = list(range(model.config.n_layer))
    with torch.enable_grad():  # the costs take a backward pass
        found = measuring.every_neuron(model, saved.chars, val, path, layers, listed=NEURONS)
    listed = [[neuron_row(n) for n in measuring.by_cost(found, layer)[:NEURONS]] for layer in layers]
    return {
        "positions": found.positions,
        "loss": found.loss,
        "firing": measuring.FIRING,
        "per_layer": 4 * model.config.n_embd,
        "layers": listed,
    }, None


def neuron_row(n: measuring.Neuron) -> dict[str, Any]:
    """One neuron as the page shows it; `words` is neurons.Neuron.words, written once, here."""
    return {
        "layer": n.layer,
        "neuron": n.neuron,
        "cost": n.cost,
        "density": n.density,
        "mean": n.mean,
        "largest": n.largest,
        "words": n.words,
        "promotes": [list(p) for p in n.promotes],
        "suppresses": [list(p) for p in n.suppresses],
        "contexts": [{"seen": c.seen, "after": c.after, "value": c.value} for c in n.contexts],
    }


def features_data(saved: Checkpoint, path: Path) -> tuple[list[dict] | None, str | None]:
    """Every feature file of the run that is this model's, as the features section browses them, or None
    and what to do (make them, or make them again)."""
    run = path.parent
    files = sorted((run / "features").glob("*.pt"))
    make = f"tinygpt features {run}"
    if not files:
        return None, f"this run has no feature files (features/*.pt); make them with {make}"
    notes, shown = [], []
    for file in files:
        site, layer = file.stem.rsplit(".", 1)[0], file.stem.rsplit(".", 1)[-1]
        try:
            features = read_features(file, saved, f"{make} --layer {layer} --site {site}")
            shown.append(feature_file_data(features))
        except UserError as e:
            notes.append(str(e))
    return (shown or None), ("; ".join(notes) or None)


def feature_file_data(features: FeatureFile) -> dict[str, Any]:
    """One feature file: its headline, its quality table, its FEATURES best-described features."""
    trained = features.record.get("quality", {})
    control = features.record.get("control", {}).get("quality", {})
    quality = [[words, quantity(trained.get(key), form), quantity(control.get(key), form)]
               for key, words, form in QUALITY_ROWS]  # fmt: skip
    listed = ranked(features.features)[:FEATURES]
    return {
        "hook": f"blocks.{features.layer}.{features.site}",
        "headline": headline(features),
        "size": features.size,
        "quality": quality,
        "features": [{**note, "summary": summary(note)} for note in listed],
    }
