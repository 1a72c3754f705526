"""What the Python API returns: numbers to compute with, which also show themselves.

In a terminal a view prints as the command prints it (`__repr__` is the command's text);
in Jupyter, VS Code or Colab, `_repr_html_` shows it drawn by the page's own script
(tinygpt.explain.inline: the page in a frame, one section shown), except the heads'
table, which is a plain HTML table. The page's data is built only when a notebook asks
for the HTML, so that a view used for its numbers costs no more than the numbers.
"""

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tinygpt.errors import UserError
from tinygpt.explain.attribution import LogitParts
from tinygpt.explain.backward import RowBackward
from tinygpt.explain.feature_notes import ranked
from tinygpt.explain.feature_text import LISTED, feature_detail, headline, quality_table, summary
from tinygpt.explain.glyphs import escaped
from tinygpt.explain.heads import HeadReport, Heads
from tinygpt.explain.inline import cell_html
from tinygpt.explain.neurons import BEFORE, FIRING, ROWS, Neuron, Neurons, by_cost
from tinygpt.explain.patching import Patching
from tinygpt.explain.roles import ROLES, SHORT_NAMES
from tinygpt.explain.walkthrough import RowArithmetic
from tinygpt.files.feature_file import FeatureFile

PageData = Callable[[], dict[str, Any]]  # builds the page's data (explain.page.page_data) when called


@dataclass(repr=False)
class View:
    """A result with its text (what the command prints) and, where the page draws it, its page view."""

    text: str
    view: str = field(default="", kw_only=True)  # the page section that draws it (inline.SECTIONS)
    page: PageData | None = field(default=None, kw_only=True)

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        if self.page is None:
            return f"<pre>{html.escape(self.text)}</pre>"
        return cell_html(self.page(), self.view)


@dataclass(repr=False)
class Attention(View):
    """Every head's attention on a prompt, drawn as the page's heatmaps with each head's role."""

    tokens: list[str]
    weights: torch.Tensor  # (n_layer, n_head, T, T): row i, where query i looks
    logits: torch.Tensor  # (T, vocab): the model's prediction after each position


@dataclass(repr=False)
class Lens(View):
    """The logit lens of a prompt: what the model would predict if it ended after each layer."""

    tokens: list[str]
    logits: torch.Tensor  # (n_layer, T, vocab)

    def probs(self) -> torch.Tensor:
        """(n_layer, T, vocab): the lens's probabilities."""
        return torch.softmax(self.logits.float(), dim=-1)


@dataclass(repr=False)
class ByHand(View):
    """softmax(q·kᵀ/√d)·V on vectors given by hand; `row`: every step's numbers."""

    row: RowArithmetic


@dataclass(repr=False)
class Walkthrough(View):
    """One character's trip through one head; `row`: softmax(q·kᵀ/√d)·V of its query, every step kept."""

    layer: int
    head: int
    token: int
    tokens: list[str]
    row: RowArithmetic


@dataclass(repr=False)
class Backward(Walkthrough):
    """The walkthrough continued backwards: every gradient from the loss at `token` into the head."""

    gradients: RowBackward


@dataclass(repr=False)
class HeadsTable(View):
    """Every head's role scores, label, entropy, importance and description (`inspect --heads`)."""

    heads: Heads

    @property
    def reports(self) -> list[HeadReport]:
        return self.heads.reports

    def _repr_html_(self) -> str:
        return heads_html(self.heads)


@dataclass(repr=False)
class Circuits(View):
    """How heads compose (Q-, K-, V-composition from the weights) and the induction knockouts."""

    edges: list[dict[str, Any]]  # {kind, source, target, score}, strongest first


@dataclass(repr=False)
class Timeline(View):
    """A run's snapshots over training, drawn as the page's timeline with its slider."""

    snapshots: list[dict[str, Any]]


@dataclass(repr=False)
class Attribution(View):
    """A logit split into the parts of the residual stream that wrote it, drawn as bars in a notebook."""

    found: LogitParts

    @property
    def parts(self) -> dict[str, float]:
        """Each part's share of the logit, by name (embed, pos_embed, L.H, attn bias L, mlp L, ln_f bias)."""
        return self.found.parts

    @property
    def logit(self) -> float:
        """The model's own logit (or difference), which the parts add up to."""
        return self.found.logit

    def _repr_html_(self) -> str:
        return attribution_html(self.found)


@dataclass(repr=False)
class Patch(View):
    """Activation patching of a clean and a corrupted prompt, drawn as two heatmaps in a notebook."""

    found: Patching

    @property
    def heads(self) -> torch.Tensor:
        """(n_layer, n_head): what each head's output alone restores."""
        return self.found.heads

    @property
    def streams(self) -> torch.Tensor:
        """(n_layer + 1, T): what the stream entering each block (last row: the final one) at each
        position restores."""
        return self.found.streams

    def _repr_html_(self) -> str:
        return patching_html(self.found)


@dataclass(repr=False)
class NeuronsTable(View):
    """Every MLP neuron of the chosen layers: density, cost, direct effect, words (`inspect --neurons`)."""

    found: Neurons

    @property
    def neurons(self) -> list[Neuron]:
        """Every neuron, layer by layer, each layer's by index."""
        return self.found.neurons

    def costliest(self, layer: int) -> list[Neuron]:
        """A layer's neurons, the costliest to switch off first."""
        return by_cost(self.found, layer)

    def _repr_html_(self) -> str:
        return neurons_html(self.found)


@dataclass(repr=False)
class NeuronDetail(View):
    """One neuron: its strongest activations marked in their text, its words, effect and cost."""

    neuron: Neuron
    found: Neurons  # its layer's neurons, and what they were measured on

    def _repr_html_(self) -> str:
        return neuron_html(self.neuron)


CELL = "padding:2px 8px;text-align:right;font-variant-numeric:tabular-nums"
POSITIVE, NEGATIVE = "#1f5fbf", "#c92a2a"  # bars and cells above and below 0


def heads_html(heads: Heads) -> str:
    """The heads' table as HTML: one row per head, its label in bold, its description beside it."""
    head = "".join(f'<th style="{CELL}">{html.escape(SHORT_NAMES[r])}</th>' for r in ROLES)
    header = f"<tr><th>head</th>{head}<th>label</th><th>entropy</th><th>importance</th><th>in words</th></tr>"
    rows = []
    for r in heads.reports:
        scores = "".join(f'<td style="{CELL}">{r.scores[role]:.3f}</td>' for role in ROLES)
        rows.append(
            f"<tr><td>{r.layer}.{r.head}</td>{scores}<td><b>{html.escape(r.label)}</b></td>"
            f'<td style="{CELL}">{r.entropy:.3f}</td><td style="{CELL}">{r.importance:+.4f}</td>'
            f'<td style="text-align:left">{html.escape(r.description)}</td></tr>'
        )
    note = (
        f"importance: validation loss with the head off (zero) minus with every head on "
        f"({heads.loss:.4f}), in nats"
    )
    return (
        f'<table class="tinygpt-heads" style="border-collapse:collapse;font-size:13px">{header}'
        f'{"".join(rows)}</table><p style="font-size:12px">{html.escape(note)}</p>'
    )


def attribution_html(found: LogitParts) -> str:
    """The parts as bars, largest first: positive ones right of the axis, negative ones left of it."""
    top = max((abs(v) for v in found.parts.values()), default=0.0) or 1.0
    rows = []
    for name, value in sorted(found.parts.items(), key=lambda kv: -kv[1]):
        share = f"{50 * abs(value) / top:.1f}%"
        colour = POSITIVE if value >= 0 else NEGATIVE
        side = "left:50%" if value >= 0 else "right:50%"
        axis = '<div style="position:absolute;left:50%;top:0;bottom:0;border-left:1px solid #999"></div>'
        bar = (
            f'<div class="bar" style="position:absolute;{side};top:3px;height:12px;width:{share};'
            f'background:{colour}"></div>'
        )
        rows.append(
            f'<tr class="part"><td style="{CELL}">{html.escape(name)}</td>'
            f'<td style="{CELL}">{value:+.4f}</td>'
            f'<td style="width:320px;position:relative">{axis}{bar}</td></tr>'
        )
    what = f"logit of {_char(found.target)}" + (f" minus {_char(found.versus)}" if found.versus else "")
    title = (
        f"{what} after position {found.position} ({_char(found.tokens[found.position])}): "
        f"the model's {found.logit:+.4f}, the parts' sum {found.total:+.4f}"
    )
    return (
        f'<div class="tinygpt-attribution"><p style="font-size:13px">{html.escape(title)}</p>'
        f'<table style="border-collapse:collapse;font-size:13px">{"".join(rows)}</table></div>'
    )


def _char(char: str) -> str:
    return repr(escaped(char))


def _shaded(score: float) -> str:
    """A table cell coloured by a patching score: blue up to 1, red below 0, white at 0."""
    strength = min(abs(score), 1.0)
    colour = POSITIVE if score >= 0 else NEGATIVE
    alpha = f"{round(strength * 255):02x}"
    ink = "#fff" if strength > 0.5 else "#000"
    return f'<td title="{score:+.4f}" style="{CELL};background:{colour}{alpha};color:{ink}">{score:+.2f}</td>'


def patching_html(found: Patching) -> str:
    """Two heatmaps: heads (layers × heads) and the streams (rows × positions), each cell its score."""
    header = "".join(f"<th>head {h}</th>" for h in range(found.heads.size(1)))
    heads = "".join(
        f"<tr><th>layer {layer}</th>{''.join(map(_shaded, row))}</tr>"
        for layer, row in enumerate(found.heads.tolist())
    )
    chars = "".join(
        f"<th>{html.escape(escaped(a))}{'' if a == b else '<br>' + html.escape(escaped(b))}</th>"
        for a, b in zip(found.clean, found.corrupted, strict=True)
    )
    streams = "".join(
        f"<tr><th>{label}</th>{''.join(map(_shaded, row))}</tr>"
        for label, row in zip(found.stream_rows(), found.streams.tolist(), strict=True)
    )
    note = (
        f"logit of {_char(found.answer)} minus {_char(found.versus)} at the last position: 0 = corrupted "
        f"({found.corrupted_difference:+.4f}), 1 = clean ({found.clean_difference:+.4f})"
    )
    table = '<table class="{}" style="border-collapse:collapse;font-size:12px">{}</table>'
    return (
        f'<div class="tinygpt-patching"><p style="font-size:13px">{html.escape(note)}</p>'
        f"<p>each head's output patched</p>{table.format('heads', f'<tr><th></th>{header}</tr>{heads}')}"
        "<p>the residual stream patched at one position (columns: clean, below it the corrupted "
        "character where they differ)</p>"
        f"{table.format('streams', f'<tr><th></th>{chars}</tr>{streams}')}</div>"
    )


@dataclass(repr=False)
class Feature(View):
    """One feature in detail: density, descriptions, histogram, characters, contexts (`--feature F`)."""

    data: dict[str, Any]  # its note (tinygpt.explain.feature_notes), with the hook point's layer and site

    def _repr_html_(self) -> str:
        return feature_html(self.data)


@dataclass(repr=False)
class Features(View):
    """A run's features of one hook point, best-described first, and their quality beside the control's."""

    file: FeatureFile

    @property
    def data(self) -> dict[str, Any]:
        """Everything the file says but its tensors, as JSON would hold it (`inspect --features --json`)."""
        f = self.file
        return {"layer": f.layer, "site": f.site, "size": f.size, "k": f.k, "record": f.record,
                "features": ranked(f.features)}  # fmt: skip

    def feature(self, feature: int) -> Feature:
        """One feature in detail (`inspect --features --feature F`)."""
        size = self.file.size
        if isinstance(feature, bool) or not isinstance(feature, int) or not 0 <= feature < size:
            raise UserError(
                f"--feature {feature!r} does not exist: the dictionary has {size:,} (0 … {size - 1})"
            )
        note = {"layer": self.file.layer, "site": self.file.site, **self.file.features[feature]}
        return Feature(feature_detail(self.file, feature), note)

    def _repr_html_(self) -> str:
        return features_html(self.file)


@dataclass(repr=False)
class Steering(View):
    """What clamping features did to the prompt's next-character odds: one dict per steer (steering.py)."""

    effects: list[dict[str, Any]]


def _marked_html(context: dict[str, Any]) -> str:
    text, i = context["text"], context["index"]
    return f"{html.escape(text[:i])}<mark>{html.escape(text[i])}</mark>{html.escape(text[i + 1 :])}"


def features_html(file: FeatureFile) -> str:
    """The quality table as text, then the best-described features as an HTML table, with a context each."""
    rows = []
    for note in ranked(file.features)[:LISTED]:
        context = _marked_html(note["contexts"][0]) if note["contexts"] else ""
        promoted = html.escape(" ".join(c for c, _ in note["promoted"][:3]))
        rows.append(
            f'<tr><td style="{CELL}">{note["feature"]}</td><td style="{CELL}">{note["density"]:.2%}</td>'
            f"<td>{promoted}</td><td>{html.escape(summary(note))}</td>"
            f'<td style="white-space:pre;font-family:monospace">{context}</td></tr>'
        )
    header = (
        "<tr><th>feature</th><th>density</th><th>promotes</th><th>best description</th><th>context</th></tr>"
    )
    top = html.escape(f"{headline(file)}\n\n{quality_table(file)}")
    return (
        f"<pre>{top}</pre>"
        f'<table class="tinygpt-features" style="border-collapse:collapse;font-size:13px">{header}'
        f"{''.join(rows)}</table>"
    )


def feature_html(note: dict[str, Any]) -> str:
    """One feature: its descriptions, its histogram as bars, its characters, its contexts marked."""
    title = html.escape(f"feature {note['feature']} of blocks.{note['layer']}.{note['site']}: "
                        f"fires on {note['density']:.2%} of validation positions")  # fmt: skip
    items = "".join(
        f"<li>{html.escape(e['words'])}: precision {e['precision']:.0%}, recall {e['recall']:.0%}</li>"
        for e in note["explanations"]
    )
    top = max(note["histogram"]) or 1
    bars = "".join(
        f'<div title="{c}" style="display:inline-block;width:10px;margin-right:1px;background:#4a7;'
        f'height:{round(40 * c / top)}px"></div>'
        for c in note["histogram"]
    )
    chars = "; ".join(f"{html.escape(c)} {v:+.3f}" for c, v in note["promoted"])
    contexts = "".join(
        f'<div style="white-space:pre;font-family:monospace">{c["value"]:7.3f}  {_marked_html(c)}</div>'
        for c in note["contexts"]
    )
    return (
        f"<p><b>{title}</b></p><ul>{items}</ul>"
        f'<div style="display:flex;align-items:flex-end;height:42px">{bars}</div>'
        f"<p>0 … {note['max']:.3f}</p><p>promotes: {chars}</p>{contexts}"
    )


def _chars_html(pairs: list[tuple[str, float]]) -> str:
    return " ".join(f'<span title="{v:+.4f}">{html.escape(escaped(c))}</span>' for c, v in pairs)


def neurons_html(found: Neurons, rows: int = ROWS) -> str:
    """Per layer, the `rows` neurons that cost most to switch off: a table row each."""
    header = "<tr><th>neuron</th><th>cost</th><th>density</th><th>promotes</th><th>in words</th></tr>"
    parts = []
    for layer in sorted(found.effects):
        mine = by_cost(found, layer)
        body = "".join(
            f'<tr class="neuron"><td>{n.name}</td><td style="{CELL}">{n.cost:+.4f}</td>'
            f'<td style="{CELL}">{n.density:.1%}</td><td>{_chars_html(n.promotes)}</td>'
            f'<td style="text-align:left">{html.escape(n.words)}</td></tr>'
            for n in mine[:rows]
        )
        parts.append(
            f"<p>layer {layer}: the {min(rows, len(mine))} of {len(mine)} neurons that cost most to switch "
            "off</p>"
            f'<table style="border-collapse:collapse;font-size:13px">{header}{body}</table>'
        )
    note = (
        f"measured on {found.positions:,} validation positions; cost: the validation loss rise (nats) with "
        f"the neuron's mean in its place, to first order; density: above {FIRING:g} of its largest activation"
    )
    note = f'<p style="font-size:12px">{html.escape(note)}</p>'
    return f'<div class="tinygpt-neurons">{"".join(parts)}{note}</div>'


def neuron_html(n: Neuron) -> str:
    """One neuron: its numbers, then each strongest activation in its text, the character marked and
    shaded by the activation."""
    rows = []
    for c in n.contexts:
        before = c.seen[:-1][-BEFORE:]
        strength = max(0.0, min(1.0, c.value / n.largest)) if n.largest > 0 else 0.0
        mark = (
            f'<mark style="background:{POSITIVE}{round(strength * 255):02x};color:#000">'
            f"{html.escape(escaped(c.seen[-1]))}</mark>"
        )
        text = html.escape("".join(map(escaped, before))) + mark + html.escape("".join(map(escaped, c.after)))
        rows.append(
            f'<tr class="context"><td style="{CELL}">{c.value:.4f}</td><td><code>{text}</code></td></tr>'
        )
    cost = f"{n.cost:+.5f} estimated" + (f", {n.measured:+.5f} measured" if n.measured is not None else "")
    lines = [
        f"<b>neuron {n.name}</b>: fires at {n.density:.2%} of the positions "
        f"(above {FIRING:g} × {n.largest:.4f})",
        html.escape(f"switching it off costs {cost} nats"),
        html.escape(f"in words: {n.words}"),
        f"promotes {_chars_html(n.promotes)}; suppresses {_chars_html(n.suppresses)}",
    ]
    shown = "".join(f"<p>{line}</p>" for line in lines)
    return (
        f'<div class="tinygpt-neuron" style="font-size:13px">{shown}'
        f'<table style="border-collapse:collapse">{"".join(rows)}</table></div>'
    )
