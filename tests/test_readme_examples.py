"""Every ```bash and ```python block of README.md runs, in order, so that no example can rot.

A block is skipped only when the line right before it says why:
`<!-- not run by the tests: needs several machines -->`.

The blocks run in one temporary directory, as a user runs them in a checkout,
with these substitutions, and only these:

- configs/<name>.yaml for each shipped config is a tiny config there (4 layers,
  2 heads and block_size 64 as in cpu.yaml, so that every --layer and --head the
  README names exists in the model a user trains; 32 wide, 30 steps) on a small corpus
  that holds every character the README's prompts use; a file that exists wins
  over the shipped config of the same name, so the README's paths reach it;
- `pip` is a stand-in that installs nothing (tinygpt and its extras are installed);
- `python` is this interpreter, and scripts/ is the checkout's.

So checkpoints/cpu/best.pt is the tiny run that the Start here block trains.
"""

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import make_corpus

ROOT = Path(__file__).resolve().parents[1]
SKIP = re.compile(r"^<!-- not run by the tests: (.+) -->$", re.MULTILINE)  # a line of its own
FENCE = re.compile(r"```(bash|python)\n(.*?)```", re.DOTALL)
PROMPTS = "ROMEO:\nTo be, or not to be\n"  # the README's prompts, in the vocabulary
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


def readme_blocks() -> list[tuple[int, str, str, str | None]]:
    """(line, language, code, why it is skipped or None) for every bash and python block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.fullmatch(before.strip())
        blocks.append((line, match.group(1), match.group(2), skip.group(1) if skip else None))
    return blocks


def test_every_skip_marker_stands_right_before_a_block_and_says_why():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    markers = SKIP.findall(text)
    skipped = [reason for *_, reason in readme_blocks() if reason is not None]
    assert skipped == markers  # none stands apart from its block, where it would skip nothing
    assert all(reason.strip() for reason in skipped)


def prepare(directory: Path) -> dict[str, str]:
    """The directory the blocks run in, and the environment they run with."""
    corpus = directory / "corpus.txt"
    corpus.write_text(make_corpus(400) + PROMPTS * 20, encoding="utf-8")
    (directory / "configs").mkdir()
    for shipped in (ROOT / "src" / "tinygpt" / "configs").glob("*.yaml"):
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


@pytest.mark.slow
def test_the_readme_examples_run(tmp_path):
    env = prepare(tmp_path)
    missing = {extra for extra, (package, _) in EXTRAS.items() if importlib.util.find_spec(package) is None}
    left_out = []
    for line, language, code, skip in readme_blocks():
        if skip is not None:
            continue
        extras = needed_extras(code)
        if missing.intersection(extras):
            left_out.append(line)
            continue
        result = run_block(language, code, tmp_path, with_numpy(env) if extras else env)
        assert result.returncode == 0, f"README.md line {line} ({language}) failed:\n{code}\n{result.stderr}"
    assert (tmp_path / "checkpoints" / "cpu" / "best.pt").is_file()
    assert (tmp_path / "explain.html").is_file()
    if left_out:
        pytest.skip(f"every other block ran; those at lines {left_out} need extras: {sorted(missing)}")
    assert (tmp_path / "exports" / "cpu" / "model.safetensors").is_file()
