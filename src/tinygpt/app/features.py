"""Features from the command line and the API: `tinygpt features RUN`, where a run keeps its feature files,
`inspect --features`, and `sample --steer L.F=VALUE` read into steers.

A run's feature files live beside its checkpoint: RUN/features/<site>.<layer>.pt (tinygpt.files.feature_file).
"""

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from tinygpt.errors import UserError, shown

STEER = re.compile(r"(?:(mlp_out|resid_post)\.)?(\d+)\.(\d+)=(.+)")
FILE_NAME = re.compile(r"(mlp_out|resid_post)\.(\d+)\.pt")


def layer_option(text: str) -> int | str:
    """--layer's value: a whole number, or `all` (argparse calls this)."""
    if text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a layer; write one in digits, e.g. 1, or all"
        ) from None


def run_checkpoint(run: str | Path) -> Path:
    """The checkpoint of RUN (a run directory: its best.pt; or a .pt file), refused when there is none."""
    path = Path(run)
    if path.is_dir():
        if not (path / "best.pt").is_file():
            raise UserError(
                f"{path} holds no checkpoint (best.pt); train the run first, or pass a run directory "
                "or a .pt file"
            )
        return path / "best.pt"
    return path


def remake(run: Path, site: str, layer: int) -> str:
    return f"tinygpt features {shown(run)} --layer {layer} --site {site}"


def features_command(args: argparse.Namespace) -> None:
    """`tinygpt features RUN`: train, score, describe and save the dictionary of each chosen layer."""
    from tinygpt.explain.feature_text import feature_list
    from tinygpt.explain.features import Options

    options = Options(site=args.site, size=args.size, k=args.k, seed=args.seed, positions=args.positions)
    for made, where in made_features(args.run, args.layer, options, args.device, not args.quiet):
        print(feature_list(made, count=10))
        print(f"wrote {shown(where)}")


def made_features(run: str | Path, layer: int | str | None, options, device: str, progress: bool) -> Iterator:
    """Each chosen layer's (a layer, None for the default, or all) dictionary trained on RUN's model,
    scored, described and saved in RUN/features/: (the FeatureFile, its path) as each is written.
    options: an explain.features.Options, its layer left out; every layer is checked before any is made."""
    from tinygpt.device import pick_device
    from tinygpt.explain.features import make_features
    from tinygpt.explain.validation import corpus_of
    from tinygpt.files.checkpoint import read_checkpoint
    from tinygpt.files.feature_file import feature_path, save_features

    checkpoint = run_checkpoint(run)
    saved = read_checkpoint(checkpoint)
    model = saved.build_model(checkpoint).to(pick_device(device)).eval()
    config = model.config
    layers = range(config.n_layer) if layer == "all" else [layer]
    chosen = [dataclasses.replace(options, layer=each).checked(config) for each in layers]
    chosen[0].check_fits(config.n_embd, model.wte.weight.device)  # every layer's dictionary is as large
    corpus = corpus_of(saved, config.block_size, checkpoint)
    for options in chosen:
        made = make_features(saved, model, corpus.train, corpus.val, options, progress)
        where = feature_path(checkpoint.parent, options.site, options.layer)
        save_features(made, where)
        yield made, where


def feature_files(run: Path, layer: int | None, site: str | None) -> list[Path]:
    """The run's feature files, those of one layer and site if given."""
    found = []
    for path in sorted((run / "features").glob("*.pt")):
        match = FILE_NAME.fullmatch(path.name)
        if match and site in (None, match.group(1)) and layer in (None, int(match.group(2))):
            found.append(path)
    return found


def chosen_file(checkpoint: Path, layer: int | None, site: str | None) -> Path:
    """The one feature file layer and site (each optional) choose, or a UserError saying which to pick."""
    from tinygpt.explain.features import DEFAULT_LAYER, SITES
    from tinygpt.files.feature_file import feature_path

    run = checkpoint.parent
    found = feature_files(run, layer, site)
    if len(found) == 1:
        return found[0]
    if not found:  # the path to make, in the message read_features gives
        return feature_path(run, site or SITES[0], DEFAULT_LAYER if layer is None else layer)
    names = ", ".join(p.name for p in found)
    raise UserError(
        f"{shown(run / 'features')} holds {names}; choose one with --layer and --site (layer=, site=)"
    )


def inspect_features(lm, args: argparse.Namespace) -> None:
    """`inspect RUN --features [--layer L] [--site S] [--feature F] [--json]`."""
    view = lm.features(args.layer, args.site)
    if args.feature is not None:
        view = view.feature(args.feature)
    print(json.dumps(plain(view.data), indent=1, ensure_ascii=False) if args.json else view)


def plain(value: object) -> object:
    """value with every NaN (a share recovered where ablating the site cost nothing) as None: valid JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def parse_steers(lm, specs: list[str] | dict) -> list:
    """--steer L.F=VALUE (or SITE.L.F=VALUE), repeatable, or the API's {"L.F": value}, as Steers."""
    from tinygpt.explain.steering import Steer

    texts = [f"{key}={value}" for key, value in specs.items()] if isinstance(specs, dict) else list(specs)
    steers = []
    for spec in texts:
        match = STEER.fullmatch(spec)
        try:
            value = float(match.group(4)) if match else None
        except ValueError:
            value = None
        if match is None or value is None or value != value or abs(value) == float("inf"):
            raise UserError(
                f"--steer {spec!r}: write LAYER.FEATURE=VALUE with a finite number, e.g. --steer 1.37=8 "
                "(or SITE.LAYER.FEATURE=VALUE, e.g. mlp_out.1.37=8)"
            )
        site, layer, feature = match.group(1), int(match.group(2)), int(match.group(3))
        features = lm.feature_file(layer, site)
        if feature >= features.size:
            raise UserError(
                f"--steer {spec}: feature {feature} does not exist: the dictionary has {features.size:,} "
                f"(0 … {features.size - 1})"
            )
        steers.append(Steer(features, feature, value))
    return steers


def steering_report(effects: list[dict]) -> str:
    """One line per steer: what was clamped, and the measured change in its promoted characters' log P."""
    lines = []
    for e in effects:
        chars = " ".join(repr(c) for c in e["promoted"])
        lines.append(
            f"steered {e['steer']} to {e['value']:g} (encoded, latent set, decoded difference added): "
            f"log P(next is one of {chars}), mean over the prompt's {e['positions']} positions, "
            f"{e['unsteered']:.3f} unsteered, {e['steered']:.3f} steered ({e['change']:+.3f} nats)"
        )
    return "\n".join(shown(line) for line in lines)


def print_steering(effects: list[dict]) -> None:
    print(steering_report(effects), file=sys.stderr)
