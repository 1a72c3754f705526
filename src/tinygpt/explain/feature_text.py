"""A feature file as text: its quality beside the control's, the features best-described first, one feature
in detail. What `tinygpt features` and `inspect --features` print, and what the API's views print."""

import math

from tinygpt.explain.feature_notes import ranked
from tinygpt.explain.glyphs import glyph
from tinygpt.files.feature_file import FeatureFile

LISTED = 40  # features the list shows
QUALITY_ROWS = (  # (key, label, format)
    ("l0", "L0 (latents firing per position)", "{:.1f}"),
    ("explained_variance", "explained variance", "{:.3f}"),
    ("loss_increase", "loss increase, reconstruction spliced in (nats/char)", "{:+.4f}"),
    ("recovered", "loss recovered against zero-ablating the site", "{:.1%}"),
    ("dead_fraction", "dead (never firing)", "{:.1%}"),
    ("dense_fraction", "dense (firing on > 10% of positions)", "{:.1%}"),
    ("precision", "best description's precision, mean", "{:.2f}"),
    ("precise_share", "features described with precision ≥ 0.5", "{:.0%}"),
)
HISTOGRAM = "▁▂▃▄▅▆▇█"


def quantity(value: object, form: str) -> str:
    """A measured number in `form`, or a dash where the record has none (absent, or not a number)."""
    if not isinstance(value, (int, float)) or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return form.format(value)


def headline(features: FeatureFile) -> str:
    """What the file is: its hook point, size, k, and what it was trained on."""
    r = features.record
    return (
        f"features of blocks.{features.layer}.{features.site}: {features.size:,} latents, k {features.k}, "
        f"trained on {r.get('positions', 0):,} positions of the training split in {r.get('seconds', 0):.0f} s"
    )


def quality_table(features: FeatureFile) -> str:
    """The quality numbers of the dictionary and of its control, side by side."""
    trained = features.record.get("quality", {})
    control = features.record.get("control", {}).get("quality", {})
    label = max(len(row[1]) for row in QUALITY_ROWS)
    lines = [
        f"on {trained.get('positions', 0):,} validation positions (the model's loss "
        f"{quantity(trained.get('loss'), '{:.4f}')} nats/char; at step 0 "
        f"{quantity(control.get('loss'), '{:.4f}')})",
        f"  {'':<{label}}  {'this model':>12}  {'control: step-0 weights':>24}",
    ]
    for key, words, form in QUALITY_ROWS:
        ours, theirs = quantity(trained.get(key), form), quantity(control.get(key), form)
        lines.append(f"  {words:<{label}}  {ours:>12}  {theirs:>24}")
    return "\n".join(lines)


def quoted(chars: list) -> str:
    return " ".join(glyph(c) for c, _ in chars)


def feature_list(features: FeatureFile, count: int = LISTED) -> str:
    """The headline, the quality table, and the `count` best-described features, one line each."""
    lines = [headline(features), "", quality_table(features), "", "best-described first:"]
    lines.append(f"  {'feature':>7}  {'density':>7}  {'promotes':<10}  best description (precision, recall)")
    shown = ranked(features.features)
    for note in shown[:count]:
        promotes = quoted(note["promoted"][:3])
        lines.append(f"  {note['feature']:>7}  {note['density']:>7.2%}  {promotes:<10}  {summary(note)}")
    if len(shown) > count:
        lines.append(f"  … {len(shown) - count:,} more: inspect --features --json, or --feature F for one")
    return "\n".join(lines)


def summary(note: dict) -> str:
    """A note's best description, with its precision and recall."""
    if not note.get("explanations"):
        return "never fires on the validation text"
    best = note["explanations"][0]
    return f"{best['words']} ({best['precision']:.0%}, {best['recall']:.0%})"


def marked(context: dict) -> str:
    """A context's text on one line, the firing character in brackets: 'the k[i]ng'."""
    text, i = context["text"], context["index"]
    show = lambda part: "".join(glyph(c) if c != " " else " " for c in part)  # noqa: E731
    return f"{show(text[:i])}[{show(text[i])}]{show(text[i + 1 :])}"


def feature_detail(features: FeatureFile, feature: int) -> str:
    """One feature: its density, descriptions, histogram, promoted and suppressed characters, contexts."""
    note = features.features[feature]
    lines = [
        f"feature {feature} of blocks.{features.layer}.{features.site}: fires on {note['density']:.2%} of "
        f"validation positions, at most {note['max']:.3f}",
        "descriptions (precision: P(fires | holds), recall: P(holds | fires)):",
    ]
    for e in note["explanations"] or [{"words": "never fires on the validation text"}]:
        numbers = f"  precision {e['precision']:.0%}  recall {e['recall']:.0%}" if "precision" in e else ""
        lines.append(f"  {e['words']}{numbers}")
    counts = note["histogram"]
    top = max(counts) or 1
    bars = "".join(HISTOGRAM[round((len(HISTOGRAM) - 1) * c / top)] if c else " " for c in counts)
    lines.append(f"activations when firing, 0 … {note['max']:.3f}: {bars}  ({', '.join(map(str, counts))})")
    lines.append("promotes (logit per unit, direct path): " + _amounts(note["promoted"]))
    lines.append("suppresses: " + _amounts(note["suppressed"]))
    lines.append("strongest contexts (the firing character in brackets):")
    lines += [f"  {c['value']:7.3f}  {marked(c)}" for c in note["contexts"]]
    return "\n".join(lines)


def _amounts(chars: list) -> str:
    return "  ".join(f"{glyph(c)} {v:+.3f}" for c, v in chars)
