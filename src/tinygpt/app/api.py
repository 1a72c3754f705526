"""tinygpt from Python, all of it here: what the commands do, as functions and one object a notebook
calls. The commands are built on these, so both give the same numbers and the same one-line UserError
for a mistake (it names the command's option or the config key).

    record = tinygpt.train("cpu_quick", out_dir="runs/quick", train={"max_iters": 300})
    tinygpt.timeline("runs/quick")              # the run's snapshots, with a slider in a notebook
    tinygpt.attention_by_hand([1, 0.5], [[1, 0], [0.5, 1]], [[0.5, 1], [1, 0]])   # no model needed
    lm = tinygpt.load("runs/quick")             # a TinyGPT: a run's checkpoint (its best.pt) or a .pt file
    lm.sample("ROMEO:", max_new_tokens=100)     # tinygpt sample
    lm.attention("To be")                       # inspect --prompt: heatmaps, each head's role
    lm.lens("To be")                            # inspect --prompt --lens
    lm.heads()                                  # inspect --heads
    with lm.ablate("1.0"): ...                  # --ablate 1.0: every call inside runs without head 1.0
    lm.walkthrough("To be", layer=1, head=0)    # explain
    lm.backward("To be", layer=1, head=0)       # explain --backward
    lm.circuits()                               # inspect --circuits
    lm.run_with_cache("To be", "blocks.*.mlp.post")  # any activation, by its hook point's name
    with lm.hooks({"blocks.1.attn.z": fn}): ...  # read or replace one while anything runs
    lm.attribution("To be", position=-1)        # inspect --attribution: which part wrote the logit
    lm.patch("abcab", "abdab")                  # inspect --patch: activation patching
    tinygpt.features("runs/quick", layer=1)     # tinygpt features: a dictionary of layer 1's mlp_out
    lm.features(layer=1)                        # inspect --features (after `tinygpt features RUN`)
    lm.sample("ROMEO:", steer={"1.37": 8})      # sample --steer 1.37=8; lm.steering(...): its effect
    lm.neurons(layer=1)                         # inspect --neurons: every MLP neuron described
"""

import json
import numbers
import os
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TextIO

import torch

from tinygpt.app.features import (
    chosen_file,
    feature_files,
    made_features,
    parse_steers,
    remake,
    steering_report,
)
from tinygpt.app.sample import Sampling, continuations
from tinygpt.config.run_config import RunConfig, load_config
from tinygpt.data.corpus import validation_windows
from tinygpt.device import pick_device
from tinygpt.errors import UserError, described, shown
from tinygpt.explain import heads as scoring
from tinygpt.explain import neurons as measuring
from tinygpt.explain.ablate import MODES, Head, ablated, parse_heads
from tinygpt.explain.attribution import logit_parts, parts_text
from tinygpt.explain.backward import STEP_LR
from tinygpt.explain.circuits import circuits_table, composition, edges
from tinygpt.explain.dictionary import TopKDictionary
from tinygpt.explain.feature_text import feature_list
from tinygpt.explain.features import POSITIONS, K, Options, dictionary_of
from tinygpt.explain.heatmap import attention_view
from tinygpt.explain.inline import CELL_LIVE_LIMIT
from tinygpt.explain.inspected import Inspected
from tinygpt.explain.lens import lens_view, logit_lens
from tinygpt.explain.page import page_data
from tinygpt.explain.patching import patching, patching_text
from tinygpt.explain.roles import Boundaries
from tinygpt.explain.steering import refuse_overflow, steering_effects, steering_hooks
from tinygpt.explain.timeline import (
    from_checkpoints,
    listeners_for,
    run_directory,
    timeline_of,
    timeline_table,
)
from tinygpt.explain.trace import chosen, trace_prompt
from tinygpt.explain.validation import validation_split_of
from tinygpt.explain.views import (
    Attention,
    Attribution,
    Backward,
    ByHand,
    Circuits,
    Features,
    HeadsTable,
    Lens,
    NeuronDetail,
    NeuronsTable,
    PageData,
    Patch,
    Steering,
    Timeline,
    Walkthrough,
)
from tinygpt.explain.walkthrough import (
    backward_text,
    row_arithmetic,
    walk_focus,
    walkthrough,
    walkthrough_of_vectors,
)
from tinygpt.files.checkpoint import Checkpoint, chosen_checkpoint, read_checkpoint
from tinygpt.files.feature_file import FeatureFile, read_features
from tinygpt.hooks import Hook
from tinygpt.model import GPT
from tinygpt.threads import threads_value
from tinygpt.tokenizer import CharTokenizer, prompt_ids


def train(
    config: str | Path | RunConfig, *, resume: bool = False, progress: bool = True, **overrides: Any
) -> dict:
    """Train a model as `tinygpt train` does: the same run directory, lock, resume and errors.

    Args:
        config: a YAML file, a shipped config by name ("cpu", "cpu_quick", …), or a RunConfig.
        resume: continue the run in out_dir from its last.pt (`--resume`).
        progress: show the progress bar.
        **overrides: config values, as `--set` gives them: a section's keys as a dict
            (`train={"max_iters": 300}`), a dotted key (`**{"train.max_iters": 300}`), or `out_dir=...`.

    Returns:
        The training record: step, best_val_loss, tokens, wall time and the last losses.
    """
    from tinygpt.training.loop import train as run_training  # here: looking inside needs no training

    if not isinstance(config, str | os.PathLike | RunConfig):
        raise UserError(f"config {described(config)} is not a path; pass a YAML file's name or a RunConfig")
    if isinstance(config, RunConfig):
        if overrides:
            raise TypeError("overrides go with a config file's name; change a RunConfig's fields directly")
    else:
        config = load_config(config, overrides_of(overrides))
    return run_training(config, resume=resume, progress=progress, listeners=listeners_for(config))


def overrides_of(values: dict[str, Any]) -> list[str]:
    """`--set` strings for keyword overrides: {"train": {"max_iters": 3}, "out_dir": "x"} ->
    ["train.max_iters=3", "out_dir=x"]; a value is written as JSON (YAML reads it back as it was)."""
    flat: list[str] = []
    for key, value in values.items():
        if isinstance(value, dict):
            flat += overrides_of({f"{key}.{k}": v for k, v in value.items()})
        else:
            text = value if isinstance(value, str) else json.dumps(value)
            flat.append(f"{key}={text}")
    return flat


def timeline(run: str | Path, from_saved_checkpoints: bool = False) -> Timeline:
    """A run's timeline (its snapshots at every evaluation), as `inspect RUN --timeline` prints it; in a
    notebook, the page's timeline with its slider. run: a run directory or a checkpoint in one.
    from_saved_checkpoints: write the timeline of a run that recorded none (`--from-checkpoints`)."""
    if not isinstance(run, str | os.PathLike):
        raise UserError(f"run {described(run)} is not a path; pass a str or a pathlib.Path")
    run_dir = run_directory(run)
    snapshots = from_checkpoints(run_dir) if from_saved_checkpoints else timeline_of(run_dir)
    saved_files = [run_dir / name for name in ("best.pt", "last.pt") if (run_dir / name).is_file()]
    page = None
    if saved_files:  # the page is built around a checkpoint: the run's best (or last)
        path = saved_files[0]

        def page():
            saved = read_checkpoint(path)
            loaded = Inspected(path, saved, saved.build_model(path))
            return page_data(path, saved.chars[0], live_limit=CELL_LIVE_LIMIT, loaded=loaded, view="timeline")

    return Timeline(timeline_table(snapshots), snapshots, view="timeline", page=page)


def attention_by_hand(q: list[float], keys: list[list[float]], values: list[list[float]]) -> ByHand:
    """softmax(q·kᵀ/√d)·V for one query on numbers small enough to check by hand, every step shown, as
    `tinygpt explain --q … --keys … --values …` prints it; `.row` holds each step's numbers."""
    text, row = walkthrough_of_vectors(q, keys, values)
    return ByHand(text, row)


def features(
    run: str | Path,
    layer: int | None = None,
    site: str = "mlp_out",
    size: int | None = None,
    k: int = K,
    seed: int = 0,
    positions: int = POSITIONS,
    device: str = "auto",
    progress: bool = True,
) -> Features:
    """A sparse dictionary of one hook point of a run's model, trained on its training text, scored beside a
    control, every feature described, saved in RUN/features/SITE.LAYER.pt, as `tinygpt features` makes it;
    `lm.features(layer)` reads it back. run: a run directory or a .pt file; layer: default 1 (or the last);
    size: latents (default 8 × the width); positions: activation rows trained on; progress: bars on stderr."""
    if not isinstance(run, str | os.PathLike):
        raise UserError(f"run {described(run)} is not a path; pass a str or a pathlib.Path")
    _whole(layer=layer, size=size, k=k, seed=seed, positions=positions)
    options = Options(site=site, size=size, k=k, seed=seed, positions=positions)
    ((made, _),) = made_features(run, layer, options, device, progress)
    return Features(feature_list(made), made)


class TinyGPT:
    """A trained checkpoint: `model` (a tinygpt.GPT, in eval mode), `tokenizer`, `record` (the training
    record: step, losses, wall time), `path` (the .pt file) and `checkpoint` (everything it holds)."""

    def __init__(self, path: Path, checkpoint: Checkpoint, model: GPT):
        self.path, self.checkpoint, self.model = path, checkpoint, model.eval()
        self.tokenizer: CharTokenizer = checkpoint.tokenizer
        self.record: dict = checkpoint.record
        self.ablated: tuple[list[Head], str] | None = None  # the heads `with ablate(...)` switched off
        self.feature_files: dict[Path, FeatureFile] = {}  # read once each
        self.inspected = Inspected(path, checkpoint, self.model)  # the corpus and head scores, read once

    def __repr__(self) -> str:
        c = self.model.config
        return (
            f"TinyGPT({str(self.path)!r}: {c.n_layer} layers × {c.n_head} heads, n_embd {c.n_embd}, "
            f"{self.model.num_params():,} parameters, step {self.checkpoint.step})"
        )

    def to_tokens(self, prompt: str) -> list[int]:
        """The prompt's ids, checked: every character in the vocabulary, at most block_size of them."""
        return prompt_ids(self.tokenizer, prompt, self.model.config.block_size)

    def sample(
        self,
        prompt: str = "",
        max_new_tokens: int = 200,
        temperature: float = 0.8,
        top_k: int | None = None,
        top_p: float | None = None,
        num_samples: int = 1,
        seed: int = 1337,
        stream: TextIO | None = None,
        use_cache: bool = True,
        steer: dict[str, float] | None = None,
        threads: int | str = "auto",
    ) -> list[str]:
        """num_samples continuations of prompt (each starting with it), as `tinygpt sample` makes them
        with the same seed; stream: also write them there character by character; steer: features
        clamped to values while sampling, {"LAYER.FEATURE": value} (`--steer`, explain/steering.py);
        threads: torch's CPU threads, a count or auto (the fastest, measured on the first steps)."""
        _text(prompt)
        _whole(max_new_tokens=max_new_tokens, top_k=top_k, num_samples=num_samples, seed=seed)
        _real(temperature=temperature, top_p=top_p)
        sampling = Sampling(max_new_tokens, temperature, top_k, top_p, num_samples, seed)
        threads = threads_value(threads, "threads")
        ids = self.to_tokens(prompt)
        steers = self._steers(steer) if steer else []
        hooks = steering_hooks(steers)
        if steers:
            refuse_overflow(self.model, ids, steers, hooks)
        with self.model.hooks(hooks):
            return continuations(
                self.model, self.tokenizer, prompt, ids, sampling, use_cache, stream=stream, threads=threads
            )

    def features(self, layer: int | None = None, site: str | None = None) -> Features:
        """The run's dictionary of one hook point, made by `tinygpt features` (layer, site: which, when the
        run has several): its quality beside the control's, its features best-described first
        (`inspect --features`); `.feature(f)` shows one."""
        _whole(layer=layer)
        n_layer = self.model.config.n_layer
        if layer is not None and not 0 <= layer < n_layer:
            raise UserError(
                f"--layer {layer} does not exist: this model has {n_layer} layers (0 … {n_layer - 1})"
            )
        features = self.feature_file(layer, site)
        return Features(feature_list(features), features)

    def feature_file(self, layer: int | None = None, site: str | None = None) -> FeatureFile:
        """The feature file of one hook point (tinygpt.files.feature_file), checked to be this model's."""
        path = chosen_file(self.path, layer, site)
        if path not in self.feature_files:
            made_as = remake(self.path.parent, *path.name.split(".")[:2])
            self.feature_files[path] = read_features(path, self.checkpoint, made_as)
        return self.feature_files[path]

    def steering(self, prompt: str, steer: dict[str, float]) -> Steering:
        """What clamping the features in steer does to prompt: the log-probability of each one's promoted
        characters, unsteered and steered (what `sample --steer` reports)."""
        _text(prompt)
        effects = steering_effects(
            self.model, self.to_tokens(prompt), self.checkpoint.chars, self._steers(steer)
        )
        return Steering(steering_report(effects), effects)

    def _steers(self, steer: dict[str, float] | list[str]) -> list:
        if not isinstance(steer, dict | list | tuple):
            raise UserError(f'steer {described(steer)} is not a dict; pass e.g. steer={{"1.37": 8}}')
        return parse_steers(self, steer)

    def run_with_cache(
        self, prompt: str, names: str | list[str] = "*"
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The logits (1, T, vocab) of prompt and the activations at the hook points matching `names`
        (a name or pattern, or a list: 'blocks.*.attn.pattern'; tinygpt.hooks lists them), by name, each
        with its batch axis of 1."""
        _text(prompt)
        patterns = [names] if isinstance(names, str) else names
        idx = torch.tensor([self.to_tokens(prompt)], device=self.model.wte.weight.device)  # (1, T)
        with torch.no_grad():
            return self.model.run_with_cache(idx, names=patterns)

    def hooks(self, hooks: dict[str, Hook]) -> AbstractContextManager[None]:
        """Inside the block every call (sample, attention, …) runs with these hooks: {name: fn}, where
        fn(activation, name) returns None to read it or a tensor to put in its place (tinygpt.hooks)."""
        return self.model.hooks(hooks)

    def attention(self, prompt: str, layer: int | None = None, head: int | None = None) -> Attention:
        """Every head's attention weights on prompt (text: the chosen layer's and head's heatmaps, all by
        default, and the next-character table, as `inspect --prompt` prints them)."""
        self._on_cpu("attention")
        _text(prompt)
        _whole(layer=layer, head=head)
        c = self.model.config
        layers, heads = chosen(layer, c.n_layer, "layer"), chosen(head, c.n_head, "head")
        ids = self.to_tokens(prompt)
        trace = trace_prompt(self.model, ids)
        text = attention_view(trace, self.tokenizer, layers, heads)
        weights = torch.stack([lt.weights for lt in trace.layers])  # (n_layer, n_head, T, T)
        page = self._page("grid", prompt, layers[0], heads[0])
        return Attention(text, self._tokens(ids), weights, trace.logits, view="grid", page=page)

    def lens(self, prompt: str) -> Lens:
        """The logit lens (n_layer, T, vocab), as `inspect --prompt --lens` prints it."""
        self._on_cpu("lens")
        _text(prompt)
        ids = self.to_tokens(prompt)
        logits = logit_lens(self.model, ids)
        text = lens_view(logits, ids, self.tokenizer)
        return Lens(text, self._tokens(ids), logits, view="lens", page=self._page("lens", prompt))

    def walkthrough(
        self, prompt: str, layer: int = 0, head: int = 0, token: int | None = None, dims: int | None = None
    ) -> Walkthrough:
        """Position `token` (default the last) through one head, every number shown, as `explain` does."""
        self._on_cpu("walkthrough")
        _text(prompt)
        _whole(layer=layer, head=head, token=token, dims=dims)
        ids = self.to_tokens(prompt)
        layer, head, token = walk_focus(self.model.config, ids, layer, head, token, dims)
        text, row = self._walk(ids, layer, head, token, dims)
        page = self._page("walkthrough", prompt, layer, head, token)
        return Walkthrough(text, layer, head, token, self._tokens(ids), row, view="walkthrough", page=page)

    def backward(
        self,
        prompt: str,
        layer: int = 0,
        head: int = 0,
        token: int | None = None,
        dims: int | None = None,
        lr: float = STEP_LR,
    ) -> Backward:
        """The walkthrough, then backwards from the loss of predicting the character after `token`
        (default: the last that has one), as `explain --backward` does; lr: the one step's size."""
        self._on_cpu("backward")
        _text(prompt)
        _whole(layer=layer, head=head, token=token, dims=dims)
        _real(lr=lr)
        ids = self.to_tokens(prompt)
        layer, head, token = walk_focus(self.model.config, ids, layer, head, token, dims, backward=True)
        text, row = self._walk(ids, layer, head, token, dims)
        back, gradients = backward_text(self.model, self.tokenizer, ids, layer, head, token, dims, lr)
        page = self._page("backward", prompt, layer, head, token, lr)
        tokens = self._tokens(ids)
        return Backward(
            f"{text}\n\n{back}", layer, head, token, tokens, row, gradients, view="backward", page=page
        )

    def heads(self, windows: int | None = None) -> HeadsTable:
        """Every head's role, entropy and importance on `windows` validation windows (default: 1,024
        positions' worth, at most 16), as `inspect --heads` scores them; scored once for these weights
        and kept beside the checkpoint (tinygpt.explain.heads_cache)."""
        self._on_cpu("heads")
        _whole(windows=windows)
        found = self.inspected.heads(windows)
        return HeadsTable(scoring.heads_table(found), found)

    def loss(self, windows: int | None = None) -> float:
        """The validation loss on the evenly spaced windows heads() scores on (with the heads `ablate`
        switched off): quick, to compare ablations; `tinygpt evaluate` scores the whole split."""
        _whole(windows=windows)
        block = self.model.config.block_size
        scoring.check_windows(None, block, windows)
        val, _ = self.inspected.validation()
        scoring.check_windows(val, block, windows)
        text = validation_windows(val, block, windows or scoring.default_count(block))
        return scoring.loss(self.model, text.to(self.model.wte.weight.device))

    def ablate(self, heads: str | list[Head], mode: str = "zero") -> AbstractContextManager:
        """`with lm.ablate("1.0,2.3", "mean"):` every call inside runs with those heads switched off:
        zero, a head adds nothing; mean, its mean output over validation text (`--ablate-mode`)."""
        if mode not in MODES:
            raise UserError(f"--ablate-mode {mode!r}: use one of {', '.join(MODES)}")
        if not isinstance(heads, str) and not (isinstance(heads, list | tuple) and all(map(_is_pair, heads))):
            raise UserError(
                f'--ablate {described(heads)}: give heads as text, e.g. "1.0,2.1", or (layer, head) pairs'
            )
        c = self.model.config
        spec = heads if isinstance(heads, str) else ",".join(f"{layer}.{h}" for layer, h in heads)
        chosen_heads = parse_heads(spec, c.n_layer, c.n_head)
        means = self.inspected.means() if mode == "mean" else None
        return _Ablation(self, chosen_heads, mode, ablated(self.model, chosen_heads, mode, means))

    def circuits(self) -> Circuits:
        """How the heads compose, from the weights, and the induction knockouts (`inspect --circuits`)."""
        self._on_cpu("circuits")
        avoid = Boundaries.of({ch: i for i, ch in enumerate(self.checkpoint.chars)}).any
        text = circuits_table(self.model, avoid)
        found = [e.as_dict() for e in edges(composition(self.model))] if self.model.config.n_layer > 1 else []
        first = self.checkpoint.chars[0]
        return Circuits(text, found, view="circuits", page=self._page("circuits", first))

    def attribution(
        self,
        prompt: str,
        position: int = -1,
        target: str | None = None,
        versus: str | None = None,
        features: bool = False,
    ) -> Attribution:
        """The logit of target (default: the character the model predicts) after `position` of prompt
        (from 0, or negative from the end), or target's minus versus's, split into what each part of the
        residual stream wrote, through ln_f with its scale held (`inspect --attribution`); features: each
        MLP whose mlp_out has a dictionary (`tinygpt features`) split into its features (`--features`)."""
        _text(prompt)
        _whole(position=position)
        if not isinstance(features, bool):
            raise UserError(f"features {described(features)} is not True or False")
        dictionaries = self._mlp_dictionaries() if features else None
        ids = self.to_tokens(prompt)
        found = logit_parts(self.model, self.tokenizer, ids, position, target, versus, dictionaries)
        return Attribution(parts_text(found), found)

    def _mlp_dictionaries(self) -> dict[int, TopKDictionary]:
        """The dictionary of each layer's mlp_out that the run has, checked to be this model's; none is
        refused."""
        run = self.path.parent
        layers = [i for i in range(self.model.config.n_layer) if feature_files(run, i, "mlp_out")]
        if not layers:
            raise UserError(
                f"--features splits each MLP's part with the run's dictionary of its mlp_out, and "
                f"{shown(run / 'features')} holds none; make one with tinygpt features {shown(run)}"
            )
        return {layer: dictionary_of(self.feature_file(layer, "mlp_out")) for layer in layers}

    def patch(
        self, clean: str, corrupted: str, answer: str | None = None, versus: str | None = None
    ) -> Patch:
        """Each head's output and the stream at each position taken from the clean prompt's run into the
        corrupted one's, scored on answer's logit minus versus's at the last position (defaults: the clean
        and the corrupted runs' predictions): 0 the corrupted run, 1 the clean (`inspect --patch`)."""
        _text(clean)
        _text(corrupted)
        found = patching(
            self.model, self.tokenizer, self.to_tokens(clean), self.to_tokens(corrupted), answer, versus
        )
        return Patch(patching_text(found), found)

    def neurons(
        self, layer: int | None = None, neuron: int | None = None, progress: bool = False
    ) -> NeuronsTable | NeuronDetail:
        """Every MLP neuron of `layer` (all layers by default) on validation text: how often it fires,
        its strongest contexts, its direct effect on the next character, what switching it off costs,
        in words (`inspect --neurons`); with `neuron`, that neuron of `layer` in detail, its cost
        measured. Kept beside the checkpoint (cache/) for the next call; progress: bars on stderr."""
        self._on_cpu("neurons")
        _whole(layer=layer, neuron=neuron)
        if neuron is not None and layer is None:
            raise UserError(f"--neuron {neuron} is a neuron of one layer; give --layer too (layer=…)")
        layers = measuring.layers_of(layer, self.model)
        if neuron is not None:
            measuring.neuron_index(neuron, self.model)
        val = validation_split_of(self.checkpoint, self.model.config.block_size, self.path)
        found = measuring.every_neuron(self.model, self.checkpoint.chars, val, self.path, layers, progress)
        if neuron is None:
            return NeuronsTable(measuring.neurons_text(found), found)
        chosen_one = next(n for n in found.neurons if n.neuron == neuron)
        chosen_one.measured = measuring.measured_cost(self.model, val, chosen_one)
        return NeuronDetail(measuring.neuron_text(found, chosen_one), chosen_one, found)

    def _on_cpu(self, what: str) -> None:
        """Looking inside runs on the CPU (its tensors are made there); sampling runs anywhere."""
        if self.model.wte.weight.device.type != "cpu":
            raise UserError(
                f"{what}() looks inside on the CPU; load the checkpoint with tinygpt.load(path) (device cpu, "
                "the default) for it, and on another device for sampling"
            )

    def _walk(self, ids: list[int], layer: int, head: int, token: int, dims: int | None) -> tuple:
        trace = trace_prompt(self.model, ids)
        lt = trace.layers[layer]
        row = row_arithmetic(lt.q[head, token], lt.k[head, : token + 1], lt.v[head, : token + 1], token)
        return walkthrough(self.model, self.tokenizer, trace, layer, head, token, dims), row

    def _tokens(self, ids: list[int]) -> list[str]:
        return [self.tokenizer.chars[i] for i in ids]

    def _page(
        self,
        view: str,
        prompt: str,
        layer: int = 0,
        head: int = 0,
        token: int | None = None,
        lr: float = STEP_LR,
    ) -> PageData:
        """What builds the data of the page's `view` (only what it draws), when a notebook asks for it."""
        loaded, off = self.inspected, self.ablated
        return lambda: page_data(
            self.path, prompt, layer, head, token, CELL_LIVE_LIMIT, lr=lr, loaded=loaded, off=off, view=view
        )


def _is_whole(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_pair(head: object) -> bool:
    return isinstance(head, tuple | list) and len(head) == 2 and all(map(_is_whole, head))


def _whole(**values: object) -> None:
    """Each keyword an int (or None): a str or float would fail deep inside with torch's TypeError."""
    for name, value in values.items():
        if value is not None and not _is_whole(value):
            option = name.replace("_", "-")
            raise UserError(
                f"--{option} {described(value)} is not a whole number; pass an int, e.g. {name}=1"
            )


def _real(**values: object) -> None:
    """Each keyword an int or a float (or None)."""
    for name, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            option = name.replace("_", "-")
            raise UserError(
                f"--{option} {described(value)} is not a number; pass an int or a float, e.g. {name}=0.5"
            )


def _text(prompt: object) -> None:
    """The prompt a str (or None, a newline as the commands' default)."""
    if prompt is not None and not isinstance(prompt, str):
        raise UserError(f'prompt {described(prompt)} is not text; pass a str, e.g. "ROMEO:"')


class _Ablation(AbstractContextManager):
    """The heads of TinyGPT.ablate switched off while inside (see tinygpt.explain.ablate)."""

    def __init__(self, lm: TinyGPT, heads: list[Head], mode: str, hooks: AbstractContextManager):
        self.lm, self.heads, self.mode, self.hooks = lm, heads, mode, hooks

    def __repr__(self) -> str:
        names = ", ".join(f"{layer}.{h}" for layer, h in self.heads)
        return f"heads {names} switched off ({self.mode}) inside `with`"

    def __enter__(self) -> TinyGPT:
        self.hooks.__enter__()
        self.lm.ablated = (self.heads, self.mode)
        return self.lm

    def __exit__(self, *exc) -> None:
        self.lm.ablated = None
        self.hooks.__exit__(*exc)


def load(path: str | Path | None = None, device: str = "cpu") -> TinyGPT:
    """A checkpoint for Python: a .pt file, a run directory (its best.pt), or None for the newest run
    under ./checkpoints, as the commands choose; on `device` (cpu, cuda, mps)."""
    if path is not None and not isinstance(path, str | os.PathLike):
        raise UserError(f"checkpoint {described(path)} is not a path; pass a str or a pathlib.Path")
    if device is not None and not isinstance(device, str | torch.device):
        raise UserError(
            f'device {described(device)} is not a device\'s name; pass a str such as "cpu" or "cuda:0"'
        )
    if isinstance(device, str):  # checked as --device is: one this machine has (an index kept)
        picked = pick_device(device.split(":", 1)[0])
        device = torch.device(device) if ":" in device else picked
    chosen_path = chosen_checkpoint(path)
    if (chosen_path / "best.pt").is_file():  # a run directory; any other directory is refused by name
        chosen_path = chosen_path / "best.pt"
    saved = read_checkpoint(chosen_path)
    return TinyGPT(chosen_path, saved, saved.build_model(chosen_path).to(device))
