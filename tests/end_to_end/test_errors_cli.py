"""Bad input, end to end through the scripts: one line `error: …`, exit code 2, no traceback.

Each case is a row of the "What happens when…" table in docs/errors.md, and the last
test here holds the two together: every row names a test that exists, and
every case has its row, with the message the case expects. The cases run as
real processes, a few at a time, each in a directory of its own.
"""

import copy
import importlib.util
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from conftest import make_corpus

from tinygpt.training.lock import RunLock

pytestmark = pytest.mark.slow  # each case runs a script in a process of its own

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "docs" / "errors.md"  # the table of what happens when, once in the README
AS_ROOT = "running as root, where file permissions do not stop reading"
NO_CUDA_HERE = "this machine has CUDA"

BASE = {
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "dropout": 0.0},
    "data": {"corpus": "corpus.txt"},
    "train": {
        "max_iters": 4,
        "eval_interval": 2,
        "eval_iters": 1,
        "batch_size": 2,
        "warmup_iters": 1,
        "device": "cpu",
    },
    "out_dir": "run",
}


@dataclass
class Given:
    """Where a case runs: its own directory, a trained run to copy, and locks to hold while it runs."""

    dir: Path
    run: Path
    hold: ExitStack


def train(given: Given, *extra: str, **sections) -> list[str]:
    """scripts/train.py on the tiny run, with some keys of its config changed: section={key: value}."""
    raw = copy.deepcopy(BASE)
    for name, values in sections.items():
        raw[name] = {**raw[name], **values} if isinstance(values, dict) else values
    (given.dir / "corpus.txt").write_text(make_corpus(200))
    (given.dir / "c.yaml").write_text(yaml.safe_dump(raw))
    return ["train.py", "--config", "c.yaml", "--quiet", *extra]


def config_file(given: Given, content: bytes) -> list[str]:
    (given.dir / "c.yaml").write_bytes(content)
    return ["train.py", "--config", "c.yaml"]


def corpus(given: Given, content: bytes) -> list[str]:
    (given.dir / "bad.txt").write_bytes(content)
    return train(given, data={"corpus": "bad.txt"})


def link_to_nothing(given: Given) -> str:
    (given.dir / "gone.pt").symlink_to(given.dir / "nowhere.pt")
    return "gone.pt"


def unreadable(path: Path) -> Path:
    path.chmod(0)
    return path


def a_file(given: Given, name: str) -> Path:
    (given.dir / name).touch()
    return given.dir / name


def copied_run(given: Given) -> Path:
    return Path(shutil.copytree(given.run, given.dir / "run"))


def resume(given: Given, *extra: str) -> list[str]:
    """Continue the copied run from its own config."""
    copied_run(given)
    return ["train.py", "--config", "run/config.yaml", "--set", "out_dir=run", "--quiet", *extra]


def without_last_pt(given: Given) -> list[str]:
    """Train afresh into a copy of the run whose last.pt is gone: best.pt, metrics and timeline remain."""
    args = resume(given)
    (given.dir / "run" / "last.pt").unlink()
    return args


def resume_damaged(given: Given) -> list[str]:
    """Continue the copied run, whose last.pt lost its second half (a disk error, a bad copy)."""
    args = resume(given, "--resume")
    last = given.dir / "run" / "last.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    return args


def in_use(given: Given) -> list[str]:
    given.hold.enter_context(RunLock(copied_run(given)))
    return ["train.py", "--config", "run/config.yaml", "--set", "out_dir=run", "--resume", "--quiet"]


def sample(given: Given, *extra: str) -> list[str]:
    return ["sample.py", "--checkpoint", str(given.run / "best.pt"), "--device", "cpu", "--seed", "1", *extra]


def checkpoint(given: Given, content: bytes | None = None, payload: dict | None = None) -> list[str]:
    path = given.dir / "x.pt"
    if payload is not None:
        torch.save(payload, path)
    else:
        path.write_bytes(content)
    return sample(given, "--checkpoint", path.name)


class RunsCode:
    """Unpickling this would create a file: the test that the file never appears."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def newer_format(given: Given) -> list[str]:
    payload = torch.load(given.run / "best.pt", weights_only=True)
    return checkpoint(given, payload={**payload, "format_version": payload["format_version"] + 1})


@dataclass
class Case:
    id: str
    args: Callable[[Given], list[str]]  # the script and its arguments, after preparing what it needs
    expect: str  # in the one error line; for exit code 0, a regular expression for all of stdout
    code: int = 2
    skip: str | None = None
    absent: str | None = None  # a file that must not exist afterwards
    file_size_limit: int | None = None  # bytes any one file may reach: a disk that fills up
    env: dict[str, str] | None = None  # environment variables set for this case only
    hidden: tuple[str, ...] = ()  # Python packages this case's process cannot import, as if not installed


CUDA = torch.cuda.is_available()
ROOTED = os.geteuid() == 0
CASES = [
    # ---- the config
    Case(
        "unknown-key",
        lambda g: train(g, train={"lerning_rate": 0.1}),
        "unknown key 'train.lerning_rate'; did you mean 'train.learning_rate'?",
    ),
    Case(
        "wrong-type",
        lambda g: train(g, model={"n_layer": "two"}),
        "model.n_layer = 'two' is not allowed; model.n_layer must be an integer ≥ 1",
    ),
    Case("zero-size", lambda g: train(g, model={"n_embd": 0}), "model.n_embd = 0 is not allowed"),
    Case(
        "negative-size", lambda g: train(g, train={"batch_size": -4}), "train.batch_size = -4 is not allowed"
    ),
    Case(
        "seed-out-of-range",
        lambda g: train(g, train={"seed": -1}),
        "train.seed = -1 is not allowed; train.seed must be an integer ≥ 0 and ≤ 4294967295",
    ),
    Case(
        "threads-not-a-count",
        lambda g: train(g, train={"threads": 0}),
        "train.threads = 0 is not allowed; train.threads must be auto or an integer ≥ 1",
    ),
    Case(
        "threads-more-than-cores",  # 100,000 crashed OpenMP (a segmentation fault) before any message
        lambda g: train(g, train={"threads": 100_000}),
        "train.threads 100000 is more than the",
        absent="run",
    ),
    Case(
        "model-too-large",
        lambda g: train(g, model={"n_embd": 200_000, "n_head": 1}),
        "the model is too large to train here",
        absent="run/*.pt",
    ),
    Case(
        "batch-too-large",
        lambda g: train(g, train={"batch_size": 100_000_000}),
        "the batch is too large to train here: 100,000,000 × 16 tokens need at least",
        absent="run",
    ),
    Case(
        "n-embd-not-divisible",
        lambda g: train(g, model={"n_embd": 100, "n_head": 3}),
        "model.n_embd = 100 is not divisible by model.n_head = 3",
    ),
    Case(
        "block-size-1",
        lambda g: train(g, model={"block_size": 1}),
        "model.block_size = 1 is not allowed; model.block_size must be an integer ≥ 4",
    ),
    Case(
        "dropout-out-of-range",
        lambda g: train(g, model={"dropout": 1.0}),
        "model.dropout must be a number ≥ 0 and < 1",
    ),
    Case(
        "learning-rate-not-positive",
        lambda g: train(g, train={"learning_rate": 0}),
        "train.learning_rate must be a number > 0",
    ),
    Case(
        "unknown-device",
        lambda g: train(g, train={"device": "tpu"}),
        "train.device must be one of auto, cpu, cuda, mps",
    ),
    Case(
        "cuda-absent",
        lambda g: train(g, train={"device": "cuda"}),
        "device cuda was asked for, but CUDA is not available on this machine",
        skip=NO_CUDA_HERE if CUDA else None,
    ),
    Case(
        "compile-without-compiler",
        lambda g: train(g, train={"compile": True}),
        "train.compile is true, but torch.compile does not work on this machine (InvalidCxxCompiler",
        absent="run",
        # no C++ compiler, and a cache of compiled kernels of its own (relative: in the case's directory)
        env={"CXX": "/nowhere/g++", "TORCHINDUCTOR_CACHE_DIR": "inductor-cache"},
    ),
    Case(
        "tensorboard-not-installed",
        lambda g: train(g, train={"tensorboard": True}),
        "train.tensorboard is true, but the Python package tensorboard is not installed: "
        "pip install 'tinygpt[tensorboard]'",
        absent="run",
        hidden=("tensorboard",),
    ),
    Case(
        "malformed-yaml",
        lambda g: config_file(g, b"model:\n  n_layer: 2\n n_head: 3\n"),
        "config file c.yaml is not valid YAML at line 3",
    ),
    Case(
        "config-not-utf8",
        lambda g: config_file(g, b"model: {n_layer: \xff}\n"),
        "config file c.yaml is not UTF-8 text (bad byte at offset 17)",
    ),
    Case(
        "config-missing",
        lambda g: ["train.py", "--config", "nowhere.yaml"],
        "config file nowhere.yaml does not exist",
    ),
    Case("config-is-directory", lambda g: ["train.py", "--config", "."], "config . is a directory"),
    Case(
        "config-unreadable",
        lambda g: [*train(g)[:2], unreadable(g.dir / "c.yaml").name],
        "cannot be read (permission denied)",
        skip=AS_ROOT if ROOTED else None,
    ),
    Case(
        "bad-override",
        lambda g: train(g, "--set", "train.max_iters"),
        "--set 'train.max_iters': write it as section.key=value",
    ),
    # ---- the corpus
    Case(
        "corpus-missing",
        lambda g: train(g, data={"corpus": "missing.txt"}),
        "corpus file missing.txt does not exist",
    ),
    Case(
        "corpus-is-directory", lambda g: train(g, data={"corpus": "."}), "corpus . is a directory, not a file"
    ),
    Case("corpus-empty", lambda g: corpus(g, b""), "corpus file bad.txt is empty"),
    Case(
        "corpus-too-short",
        lambda g: corpus(g, b"short"),
        "corpus bad.txt has 5 characters, fewer than model.block_size + 1 = 17",
    ),
    Case(
        "corpus-not-utf8",
        lambda g: corpus(g, b"hello \xff world " * 10),
        "corpus file bad.txt is not UTF-8 text: byte 0xff at offset 6",
    ),
    Case(
        "corpus-unreadable",
        lambda g: train(g, data={"corpus": unreadable(g.dir / "corpus.txt").name}),
        "cannot be read (permission denied)",
        skip=AS_ROOT if ROOTED else None,
    ),
    # ---- the run directory and training
    Case(
        "out-dir-is-a-file",
        lambda g: train(g, out_dir=a_file(g, "taken").name),
        "out_dir taken is a file, not a directory",
    ),
    Case(
        "out-dir-unwritable",
        lambda g: train(g, out_dir=f"{a_file(g, 'afile').name}/run"),
        "cannot write to run directory afile/run: Not a directory",
    ),
    Case("run-exists", lambda g: resume(g), "run already holds a run; add --resume to continue it"),
    Case(
        "run-without-last-pt",
        without_last_pt,
        "but no last.pt; add --resume to continue from best.pt's weights, or start a new run elsewhere",
    ),
    Case(
        "resume-without-run",
        lambda g: train(g, "--resume"),
        "--resume: there is no run/last.pt to resume from",
    ),
    Case("run-in-use", in_use, "run is in use by another training run (pid"),
    Case(
        "resume-past-max-iters",
        lambda g: resume(g, "--resume", "--set", "train.max_iters=1"),
        "--resume: run/last.pt is at step 4, past train.max_iters = 1",
    ),
    Case(
        "resume-damaged",
        resume_damaged,
        "checkpoint run/last.pt is truncated or corrupted and cannot be read; --resume needs it",
    ),
    Case(
        "loss-diverges",
        lambda g: train(
            g,
            train={
                "learning_rate": 1e9,
                "warmup_iters": 0,
                "grad_clip": 0,
                "max_iters": 20,
                "eval_interval": 10,
            },
        ),
        "training diverged: the loss was nan at step",
    ),
    Case(
        "disk-full",
        lambda g: train(g),
        "cannot save checkpoint run/last.pt: File too large; the previous last.pt, if any, is intact",
        file_size_limit=60_000,  # the corpus's id cache fits, a checkpoint does not
    ),
    # ---- sampling
    Case(
        "empty-prompt", lambda g: sample(g, "--prompt", "", "--max-new-tokens", "20"), r"(?s).{20}\n", code=0
    ),
    Case(
        "prompt-outside-vocabulary",
        lambda g: sample(g, "--prompt", "KING: Zü"),
        "2 character(s) not in the model's vocabulary: 'Z', 'ü'",
    ),
    Case(
        "prompt-not-utf8",  # bytes the locale cannot decode reach Python as lone surrogates (surrogateescape)
        lambda g: sample(g, "--prompt", "KING: \udcff"),
        "the prompt is not UTF-8 text: byte(s) 0xff cannot be decoded",
    ),
    Case(
        "max-new-tokens-negative",
        lambda g: sample(g, "--max-new-tokens", "-1"),
        "--max-new-tokens -1 is negative",
    ),
    Case(
        "temperature-negative", lambda g: sample(g, "--temperature", "-0.5"), "--temperature -0.5 is negative"
    ),
    Case("top-k-below-1", lambda g: sample(g, "--top-k", "0"), "--top-k 0 is below 1"),
    Case(
        "threads-option-not-a-count",
        lambda g: sample(g, "--threads", "many"),
        "--threads many is not allowed; use auto or a whole number ≥ 1",
    ),
    Case(
        "threads-option-more-than-cores",
        lambda g: sample(g, "--threads", "100000"),
        "--threads 100000 is more than the",
    ),
    Case(
        "top-k-above-vocabulary",
        lambda g: sample(g, "--prompt", "KING:", "--top-k", "1000", "--max-new-tokens", "10"),
        r"KING:(?s:.{10})\n",
        code=0,
    ),
    Case("top-p-zero", lambda g: sample(g, "--top-p", "0"), "--top-p 0.0 is outside (0, 1]"),
    Case("top-p-above-1", lambda g: sample(g, "--top-p", "1.5"), "--top-p 1.5 is outside (0, 1]"),
    # ---- argparse's own mistakes, said as tinygpt says one
    Case(
        "option-not-a-whole-number",
        lambda g: sample(g, "--max-new-tokens", "1e9"),
        "--max-new-tokens '1e9' is not a whole number; write one in digits, e.g. --max-new-tokens 1000000000",
    ),
    Case(
        "seed-not-a-whole-number",
        lambda g: sample(g, "--seed", "1.5"),
        "--seed '1.5' is not a whole number; write one in digits, e.g. --seed 1337",
    ),
    Case(
        "option-not-a-choice",
        lambda g: ["export.py", str(g.run / "best.pt"), "out", "--format", "onnx"],
        "--format takes no 'onnx': choose one of hf, safetensors, transformer-lens, sae-lens",
    ),
    Case(
        "negative-value-read-as-an-option",
        lambda g: sample(g, "--temperature", "-1e-300"),
        "--temperature needs a value after it; one that starts with '-' is joined to it by '='",
    ),
    Case(
        "unknown-option",
        lambda g: sample(g, "--top_k", "3"),
        "tinygpt sample has no option --top_k; did you mean --top-k?",
    ),
    Case(
        "sample-cuda-absent",
        lambda g: sample(g, "--device", "cuda"),
        "device cuda was asked for, but CUDA is not available on this machine",
        skip=NO_CUDA_HERE if CUDA else None,
    ),
    # ---- checkpoints
    Case(
        "checkpoint-missing",
        lambda g: sample(g, "--checkpoint", "nothing.pt"),
        "checkpoint nothing.pt does not exist; check the path",
    ),
    Case(
        "path-with-control-characters",
        lambda g: sample(g, "--checkpoint", "two\nlines\x1b[31m.pt"),
        "checkpoint two\\nlines\\x1b[31m.pt does not exist",  # one line, and nothing turns red
    ),
    Case(
        "windows-beyond-the-split",
        lambda g: ["inspect_checkpoint.py", str(g.run / "best.pt"), "--heads", "--windows", "1000000000"],
        "--windows 1,000,000,000 is more than the",
    ),
    Case("checkpoint-is-directory", lambda g: sample(g, "--checkpoint", "."), "checkpoint . is a directory"),
    Case(
        "checkpoint-dangling-link",
        lambda g: sample(g, "--checkpoint", link_to_nothing(g)),
        "checkpoint gone.pt is a symbolic link to nothing (or a loop of links)",
    ),
    Case(
        "checkpoint-starting-with-a-dash",
        lambda g: sample(g, "--checkpoint", "-x.pt"),
        "--checkpoint needs a value after it; one that starts with '-' is joined to it by '=', "
        "as in --checkpoint=-x.pt",
    ),
    # ---- export and explain by hand
    Case(
        "export-out-dir-empty",
        lambda g: ["export.py", str(g.run / "best.pt"), "", "--format", "safetensors"],
        "the export's out_dir is empty; name a new directory",
    ),
    Case(
        "vectors-not-finite",
        lambda g: ["explain.py", "--q", "inf,1", "--keys", "1,0", "--values", "1,0"],
        "--q, --keys and --values take finite numbers within float32's range",
    ),
    Case(
        "scores-overflow",
        lambda g: ["explain.py", "--q", "1e30,1e30", "--keys", "1e30,1e30", "--values", "1,0"],
        "the scores q·k overflow float32",
    ),
    Case(
        "checkpoint-truncated",
        lambda g: checkpoint(g, (g.run / "best.pt").read_bytes()[:-100]),
        "is truncated or corrupted and cannot be read",
    ),
    Case(
        "checkpoint-empty",
        lambda g: ["inspect_checkpoint.py", a_file(g, "empty.pt").name],
        "empty.pt is empty",
    ),
    Case("not-a-checkpoint", lambda g: checkpoint(g, b"some notes\n"), "x.pt is not a tinygpt checkpoint"),
    Case(
        "checkpoint-bare-pickle",
        lambda g: checkpoint(g, pickle.dumps({"format_version": 1}, protocol=4)),
        "x.pt is not a tinygpt checkpoint",
    ),
    Case("checkpoint-newer-format", newer_format, "has format version 4, newer than this tinygpt reads (3)"),
    Case(
        "checkpoint-runs-code",
        lambda g: checkpoint(g, payload={"format_version": 1, "model": RunsCode(g.dir / "pwned")}),
        "refusing to load",
        absent="pwned",
    ),
    Case(
        "checkpoint-unreadable",
        lambda g: sample(g, "--checkpoint", unreadable(Path(shutil.copy(g.run / "best.pt", g.dir))).name),
        "cannot be read (permission denied)",
        skip=AS_ROOT if ROOTED else None,
    ),
]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A 4-step run of the tiny config, for the cases that sample or resume."""
    from conftest import train as train_run

    from tinygpt.config.run_config import from_dict

    root = tmp_path_factory.mktemp("trained")
    (root / "corpus.txt").write_text(make_corpus(200))
    raw = {**copy.deepcopy(BASE), "out_dir": str(root / "run")}
    raw["data"]["corpus"] = str(root / "corpus.txt")
    train_run(from_dict(raw), progress=False)
    return root / "run"


# Starting torch costs seconds of CPU, which forty cold starts would spend over and over. So one
# process imports it once and forks a child per case; the child runs the script file as __main__,
# with its own working directory, stdout, stderr, exit status and limits, as a fresh start would.
WARM_RUNNER = """
import json, os, resource, runpy, sys, traceback
import torch  # the slow part of every start, done once
import tinygpt.app.cli, tinygpt.explain.report, tinygpt.app.sample, tinygpt.training.loop


def run(job):
    os.chdir(job["cwd"])
    for fd, name in ((1, "stdout"), (2, "stderr")):
        out = os.open(job[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, fd)
        os.close(out)
    os.environ.update(job["env"])
    sys.modules.update(dict.fromkeys(job["hidden"]))  # None there: importing it raises ImportError
    if job["file_size_limit"]:  # writes past it fail with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (job["file_size_limit"],) * 2)
    sys.argv = job["argv"]
    code = 0
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


pending, running = [json.loads(line) for line in sys.stdin], {}
while pending or running:
    while pending and len(running) < 4:
        job = pending.pop(0)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            run(job)
        running[pid] = job["id"]
    pid, status = os.wait()
    print(json.dumps({"id": running.pop(pid), "code": os.waitstatus_to_exitcode(status)}), flush=True)
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, trained_run) -> dict[str, subprocess.CompletedProcess]:
    """Every case that runs here, each run as its own process."""
    outputs = tmp_path_factory.mktemp("outputs")
    with ExitStack() as hold:
        jobs = []
        for case in CASES:
            if case.skip:
                continue
            given = Given(tmp_path_factory.mktemp(case.id), trained_run, hold)
            script, *args = case.args(given)
            jobs.append(
                {
                    "id": case.id,
                    "argv": [str(ROOT / "scripts" / script), *args],
                    "cwd": str(given.dir),
                    "stdout": str(outputs / f"{case.id}.out"),
                    "stderr": str(outputs / f"{case.id}.err"),
                    "file_size_limit": case.file_size_limit,
                    "env": case.env or {},
                    "hidden": case.hidden,
                }
            )
        runner = subprocess.run(
            [sys.executable, "-c", WARM_RUNNER],
            input="".join(json.dumps(job) + "\n" for job in jobs),
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONIOENCODING": "utf-8"},
            timeout=600,
        )
    assert runner.returncode == 0, runner.stderr
    codes = {r["id"]: r["code"] for r in map(json.loads, runner.stdout.splitlines())}
    return {
        job["id"]: subprocess.CompletedProcess(
            job["argv"],
            codes[job["id"]],
            Path(job["stdout"]).read_text(encoding="utf-8"),
            Path(job["stderr"]).read_text(encoding="utf-8"),
        )
        for job in jobs
    }


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, outcomes, tmp_path_factory):
    if case.skip:
        pytest.skip(case.skip)
    result = outcomes[case.id]
    assert result.returncode == case.code, result.stderr
    assert "Traceback" not in result.stderr
    if case.code == 0:
        assert re.fullmatch(case.expect, result.stdout), result.stdout
    else:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        assert case.expect in lines[0]
        quoted = re.search(r"`(error: [^`]*)`", readme_row(case.id)[1]).group(1)  # … stands for anything
        assert re.fullmatch(".*?".join(map(re.escape, quoted.split("…"))), lines[0]), (quoted, lines[0])
    if case.absent:
        assert not list(tmp_path_factory.getbasetemp().glob(f"{case.id}*/{case.absent}"))


# ------------------------------------------------------------------ the README's table


def readme_rows() -> list[list[str]]:
    """The rows of the table under '## What happens when…', as lists of cells."""
    section = README.read_text().split("## What happens when…", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split(" | ") for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows if row[0].strip() != "when"]  # not the headers


def readme_row(case_id: str) -> list[str]:
    (row,) = [row for row in readme_rows() if f"`test_errors_cli.py::test_bad_input[{case_id}]`" in row[-1]]
    return row


def names_a_test(node: str) -> bool:
    """Whether `file.py::test_name[param]` names a test in tests/."""
    match = re.fullmatch(r"(\w+)\.py::(\w+)(?:\[([\w-]+)\])?", node)
    if not match:
        return False
    module_name, name, param = match.groups()
    found = sorted((ROOT / "tests").rglob(f"{module_name}.py"))  # in the folder of its room
    if len(found) != 1:
        return False
    if module_name not in sys.modules:  # run alone: import it as pytest would, its folder on the path
        sys.path.insert(0, str(found[0].parent))
        spec = importlib.util.spec_from_file_location(module_name, found[0])
        sys.modules[module_name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[module_name])
    module = sys.modules[module_name]
    func = getattr(module, name, None)
    if func is None or not name.startswith("test_"):
        return False
    if param is None:
        return True
    ids = set()
    for mark in getattr(func, "pytestmark", []):
        if mark.name == "parametrize" and isinstance(mark.kwargs.get("ids"), list):
            ids |= set(mark.kwargs["ids"])
    return param in ids


def test_every_readme_row_is_a_test_and_every_case_a_row():
    for row in readme_rows():
        nodes = re.findall(r"`([\w.]+::[\w\[\]-]+)`", row[-1])
        assert nodes, f"no test named in the row {row}"
        for node in nodes:
            assert names_a_test(node), f"README names {node}, which is not a test"
    for case in CASES:  # each has its row (test_bad_input checks the message it quotes)
        assert readme_row(case.id)[2] == str(case.code), f"{case.id}: another exit code in the README"
