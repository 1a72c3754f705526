"""The scripts end to end, as a user runs them: real processes, exit codes, stderr.

Bad input of every kind is in test_errors_cli.py, one case per row of the table in docs/errors.md.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tinygpt.app.cli import build_parser
from tinygpt.config.run_config import load_config

ROOT = Path(__file__).resolve().parents[2]


def script(name: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def assert_user_error(result: subprocess.CompletedProcess, message: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0]


def test_train_sample_inspect(tmp_path, corpus_file):
    config = tmp_path / "c.yaml"
    config.write_text(
        f"model: {{n_layer: 1, n_head: 2, n_embd: 16, block_size: 16, dropout: 0.0}}\n"
        f"data: {{corpus: {corpus_file}}}\n"
        f"train: {{max_iters: 30, eval_interval: 15, eval_iters: 2, batch_size: 4, device: cpu}}\n"
        f"out_dir: {tmp_path / 'run'}\n"
    )
    result = script("train.py", "--config", str(config), "--quiet")
    assert result.returncode == 0, result.stderr
    assert "done: step 30" in result.stdout
    best = tmp_path / "run" / "best.pt"
    result = script("sample.py", "--checkpoint", str(best), "--prompt", "KING:", "--max-new-tokens", "20")
    assert result.returncode == 0 and result.stdout.startswith("KING:") and len(result.stdout) == 26
    result = script("inspect_checkpoint.py", str(best))
    assert result.returncode == 0
    assert (
        "total" in result.stdout
        and "n_embd       16" in result.stdout
        and "step           30" in result.stdout
    )
    assert_user_error(script("train.py", "--config", str(config)), "already holds a run")
    assert_user_error(script("sample.py", "--checkpoint", str(best), "--prompt", "ZZZ"), "'Z'")


@pytest.mark.slow
def test_a_reader_that_stops_early_ends_the_command_quietly(odd_checkpoint):
    """`tinygpt sample … | head -1`: when the pipe closes, no traceback, and the shell's SIGPIPE status."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "sample.py"), "--checkpoint", str(odd_checkpoint)]
        + ["--max-new-tokens", "20000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.read(1)  # it has started writing; then the reader goes away
    process.stdout.close()
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 141 and stderr == b""


def test_the_explain_example_names_a_head_that_cpu_yaml_s_model_has():
    """`tinygpt explain --help` shows an example on the README's checkpoints/cpu: its head must exist."""
    parser = build_parser()
    explain = parser._subparsers._group_actions[0].choices["explain"]  # argparse keeps subparsers here
    layer, head = map(int, re.search(r"--layer (\d+) --head (\d+)", explain.epilog).groups())
    model = load_config("configs/cpu.yaml").model
    assert layer < model.n_layer and head < model.n_head


@pytest.mark.parametrize("command", ["sample", "inspect", "explain"])
def test_the_ablate_example_names_heads_that_cpu_yaml_s_model_has(command):
    """`--ablate`'s help names heads of the README's model (4 layers of 2 heads): it would refuse others."""
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]
    (ablate,) = [a for a in sub._actions if "--ablate" in a.option_strings]
    heads = [map(int, h.split(".")) for h in re.search(r"--ablate ([\d.,]+)", ablate.help)[1].split(",")]
    model = load_config("configs/cpu.yaml").model
    assert heads and all(layer < model.n_layer and head < model.n_head for layer, head in heads)
