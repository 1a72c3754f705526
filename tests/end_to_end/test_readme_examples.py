"""Every ```bash and ```python block of README.md and of each guide in docs/ runs, so that no example can rot.

A block is skipped only when the line right before it says why:
`<!-- not run by the tests: needs several machines -->`.

README.md's blocks run in order in one temporary directory, as a user runs them in a
checkout; then each guide's blocks run in order in a copy of that directory, so that a
guide can use what the README's commands made (checkpoints/cpu above all) and no guide
depends on another. With these substitutions, and only these:

- configs/<name>.yaml for each shipped config is a tiny config there (4 layers,
  2 heads and block_size 64 as in cpu.yaml, so that every --layer and --head the
  guides name exists in the model a user trains; 32 wide, 30 steps) on a small corpus
  that holds every character the guides' prompts use; a file that exists wins
  over the shipped config of the same name, so the guides' paths reach it;
- `pip` is a stand-in that installs nothing (tinygpt and its extras are installed);
- `python` is this interpreter, and scripts/ is the checkout's.

So checkpoints/cpu/best.pt is the tiny run that the Start here block trains.
"""

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import make_corpus

ROOT = Path(__file__).resolve().parents[2]
SKIP = re.compile(r"^<!-- not run by the tests: (.+) -->$", re.MULTILINE)  # a line of its own
FENCE = re.compile(r"```(bash|python)\n(.*?)```", re.DOTALL)
PROMPTS = "ROMEO:\nTo be, or not to be\n"  # the guides' prompts, in the vocabulary
GUIDES = sorted((ROOT / "docs").glob("*.md"))
TINY = {
    "model": {"n_layer": 4, "n_head": 2, "n_embd": 32, "block_size": 64, "dropout": 0.0},
    "train": {
        "batch_size": 4,
        "max_iters": 30,
        "eval_interval": 15,
        "eval_iters": 2,
        "warmup_iters": 2,
        "device": "cpu",
        "dtype": "float32",
    },
}


def blocks(path: Path) -> list[tuple[int, str, str, str | None]]:
    """(line, language, code, why it is skipped or None) for every bash and python block of a file."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.fullmatch(before.strip())
        found.append((line, match.group(1), match.group(2), skip.group(1) if skip else None))
    return found


@pytest.mark.parametrize("path", [ROOT / "README.md", *GUIDES], ids=lambda p: p.name)
def test_every_skip_marker_stands_right_before_a_block_and_says_why(path):
    markers = SKIP.findall(path.read_text(encoding="utf-8"))
    skipped = [reason for *_, reason in blocks(path) if reason is not None]
    assert skipped == markers  # none stands apart from its block, where it would skip nothing
    assert all(reason.strip() for reason in skipped)


def prepare(directory: Path) -> dict[str, str]:
    """The directory the blocks run in, and the environment they run with."""
    corpus = directory / "corpus.txt"
    corpus.write_text(make_corpus(400) + PROMPTS * 20, encoding="utf-8")
    (directory / "configs").mkdir()
    for shipped in (ROOT / "configs").glob("*.yaml"):
        config = {**TINY, "data": {"corpus": str(corpus)}, "out_dir": f"checkpoints/{shipped.stem}"}
        (directory / "configs" / shipped.name).write_text(yaml.safe_dump(config))
    (directory / "scripts").symlink_to(ROOT / "scripts")
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir / "python", f'exec {shlex.quote(sys.executable)} "$@"')  # a link would leave the venv
    stand_in(bin_dir / "pip", "echo 'pip: nothing to install here (the README test)'")
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])
    return {**os.environ, "PATH": path}


def stand_in(path: Path, line: str) -> None:
    path.write_text(f"#!/bin/sh\n{line}\n")
    path.chmod(0o755)


def run_block(language: str, code: str, directory: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = ["bash", "-euo", "pipefail", "-c", code] if language == "bash" else [sys.executable, "-c", code]
    return subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=600)


EXTRAS = {  # an extra -> its package, and what in a block says that the block needs it
    "hf": ("transformers", ["[hf]", "transformers"]),
    "tensorboard": ("tensorboard", ["[tensorboard]", "train.tensorboard"]),
    "wandb": ("wandb", ["[wandb]", "train.wandb"]),
    "lens": ("transformer_lens", ["[lens]", "lens_bridge", "transformer-lens"]),
}


def needed_extras(code: str) -> list[str]:
    """The extras a block needs: it installs one, imports its package or switches it on."""
    return [extra for extra, (_, signs) in EXTRAS.items() if any(sign in code for sign in signs)]


def with_numpy(env: dict[str, str]) -> dict[str, str]:
    """env without conftest's NumPy shadow: the extras need NumPy, and bring it."""
    paths = env.get("PYTHONPATH", "").split(os.pathsep)
    kept = [p for p in paths if p and not (Path(p) / "numpy").is_dir()]
    return {**env, "PYTHONPATH": os.pathsep.join(kept)}


def run_blocks(path: Path, directory: Path, env: dict[str, str]) -> list[int]:
    """Run a file's blocks in order in directory; the lines of those left out for want of an extra."""
    missing = {extra for extra, (package, _) in EXTRAS.items() if importlib.util.find_spec(package) is None}
    left_out = []
    for line, language, code, skip in blocks(path):
        if skip is not None:
            continue
        extras = needed_extras(code)
        if missing.intersection(extras):
            left_out.append(line)
            continue
        result = run_block(language, code, directory, with_numpy(env) if extras else env)
        assert result.returncode == 0, (
            f"{path.name} line {line} ({language}) failed:\n{code}\n{result.stderr}"
        )
    return left_out


@pytest.fixture(scope="module")
def after_readme(tmp_path_factory) -> tuple[Path, dict[str, str], list[int]]:
    """The directory the README's blocks ran in, their environment, and the lines left out."""
    directory = tmp_path_factory.mktemp("readme")
    env = prepare(directory)
    return directory, env, run_blocks(ROOT / "README.md", directory, env)


@pytest.mark.slow
def test_the_readme_examples_run(after_readme):
    directory, _, left_out = after_readme
    assert (directory / "checkpoints" / "cpu" / "best.pt").is_file()
    assert (directory / "explain.html").is_file()
    if left_out:
        pytest.skip(f"every other block ran; those at lines {left_out} need extras")
    assert (directory / "exports" / "cpu" / "model.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
def test_the_guides_examples_run(after_readme, guide, tmp_path):
    directory, env, _ = after_readme
    copy = tmp_path / "checkout"
    shutil.copytree(directory, copy, symlinks=True)  # the README's runs, for this guide alone
    left_out = run_blocks(guide, copy, env)
    if left_out:
        pytest.skip(f"every other block ran; those at lines {left_out} need extras")


def test_the_guides_quote_the_figures_make_pictures_wrote():
    """What the guides show of the trained run is what scripts/make_pictures.py last wrote."""
    figures = json.loads((ROOT / "docs" / "figures.json").read_text(encoding="utf-8"))
    heads = (ROOT / "docs" / "heads.md").read_text(encoding="utf-8")
    for name in ("heads", "timeline"):
        assert figures["printed"][name][1].rstrip("\n") in heads, name
    inside = (ROOT / "docs" / "inside.md").read_text(encoding="utf-8")
    attention = figures["printed"]["attention"][1]
    assert attention[attention.index("layer 2 head 0") : attention.index("top 5")].strip() in inside
    walkthrough = figures["printed"]["walkthrough"][1].splitlines()
    assert all(line in inside for line in walkthrough if not re.match(r"^\s+(\d+) '", line))  # rows: some
    assert f"a {figures['page_mb']} MB" in inside
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "\n".join(figures["printed"]["sample"][1].splitlines()[:13]) in readme
    assert f"about {figures['best_val_loss']:.2f}" in readme
    whole = float(re.search(r"loss (\d+\.\d+) on the validation split", figures["printed"]["evaluate"][1])[1])
    assert f"({whole:.3f} on the whole validation split)" in readme
