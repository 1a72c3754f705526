"""Shared fixtures: a small generated corpus and a config that trains on it in seconds."""

import importlib.util
import os
import random
import resource
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from tinygpt.config.run_config import from_dict

WORDS = (
    "the king and queen of a fair land spoke to their lords with grace and wit "
    "but night fell soon upon the hall where the fool sang of love and war"
).split()


def make_corpus(n_lines: int = 1500, seed: int = 0) -> str:
    """Speaker lines and speeches of random words: structured enough for a tiny model to learn."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        speaker = rng.choice(["KING", "QUEEN", "FOOL"])
        speech = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10)))
        lines.append(f"{speaker}:\n{speech.capitalize()}.\n")
    return "\n".join(lines)


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py imported as a module (the folder is not a package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session", autouse=True)
def scripts_run_without_numpy(tmp_path_factory):
    """Every script a test starts in a subprocess sees no NumPy, as after `pip install tinygpt`.

    tinygpt's dependencies do not include NumPy, but the test extras pull it in
    (through transformers). A `numpy` package that fails to import, first on
    PYTHONPATH, keeps the scripts honest: anything that quietly needs NumPy fails here.
    """
    shadow = tmp_path_factory.mktemp("no_numpy") / "numpy"
    shadow.mkdir()
    (shadow / "__init__.py").write_text('raise ModuleNotFoundError("NumPy is hidden from the scripts")\n')
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shadow.parent), previous]))
    yield
    if previous is None:
        del os.environ["PYTHONPATH"]
    else:
        os.environ["PYTHONPATH"] = previous


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(make_corpus(), encoding="utf-8")
    return path


def tiny_raw(corpus: Path, out_dir: Path, **train) -> dict:
    """A plain-data config for a ~20k-parameter model, as a YAML file would give it."""
    return {
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16, "dropout": 0.0},
        "data": {"corpus": str(corpus), "val_fraction": 0.1},
        "train": {
            "batch_size": 8,
            "max_iters": 60,
            "learning_rate": 3e-3,
            "min_lr": 3e-4,
            "warmup_iters": 5,
            "eval_interval": 20,
            "eval_iters": 4,
            "log_interval": 5,
            "device": "cpu",
            "dtype": "float32",  # the same numbers on every CPU; train.dtype auto would pick by the CPU
            "threads": 1,  # the same reduction order in every run (train.threads auto picks by timing)
            **train,
        },
        "out_dir": str(out_dir),
    }


@pytest.fixture
def tiny_config(corpus_file: Path, tmp_path: Path):
    return from_dict(tiny_raw(corpus_file, tmp_path / "run"))


def train(config, resume: bool = False, progress: bool = True):
    """The training loop as `tinygpt train` runs it: handed the timeline's recorder (unless train.timeline
    is off), so a run here writes what a run from the command line writes."""
    from tinygpt.explain.timeline import listeners_for
    from tinygpt.training.loop import train as loop_train

    return loop_train(config, resume, progress, listeners_for(config))


ODD_LINES = "FOOL:\n<b>Tom & \"Jerry\"</b>\t'yes' 😀 café\n"  # markup, quotes, a tab, an emoji, an accent


@pytest.fixture(scope="session")
def odd_checkpoint(tmp_path_factory) -> Path:
    """A tiny trained run (best.pt + metrics.jsonl) whose vocabulary holds characters that need escaping."""
    root = tmp_path_factory.mktemp("odd")
    corpus = root / "corpus.txt"
    corpus.write_text(make_corpus(300) + ("\n" + ODD_LINES) * 20, encoding="utf-8")
    train(from_dict(tiny_raw(corpus, root / "run", max_iters=30, eval_interval=10)), progress=False)
    return root / "run" / "best.pt"


@pytest.fixture
def one_thread():
    """Run torch on one thread: for these tiny models extra threads only wait on each other,
    and on a busy machine they slow training down several times over."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def trained_on_one_thread(config_name: str, root: Path, steps: int, *overrides: str) -> Path:
    """A shipped config (`induction`, …) trained for `steps` into root/run on one thread, its corpus under
    root/data, as `tinygpt train` trains it; the run directory."""
    import torch

    from tinygpt.config.run_config import load_config

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as one_thread does, for a module's fixture too: a tiny model
    try:
        settings = [f"out_dir={root / 'run'}", f"data.data_dir={root / 'data'}", f"train.max_iters={steps}"]
        train(load_config(config_name, [*settings, *overrides]), progress=False)
    finally:
        torch.set_num_threads(before)
    return root / "run"


@pytest.fixture
def ctrl_c_handled():
    """SIGINT handled as in an interactive Python, for this process and the processes it starts.

    A test run started in the background by a script inherits an ignored SIGINT,
    which training (rightly) keeps ignoring and which children would inherit.
    """
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def broken_link(link: Path, loop: bool) -> Path:
    """link made a symbolic link to nothing, or (loop) one of two links pointing at each other."""
    other = link.with_name("other-" + link.name)
    if loop:
        other.symlink_to(link)
    link.symlink_to(other)
    return link


UNOPENABLE = ["loop", "under-a-file", "name-too-long"]  # paths the system cannot open, by kind


def unopenable_path(directory: Path, kind: str, suffix: str) -> tuple[Path, str]:
    """A path of that kind in directory, and the system's reason for refusing it: a loop of links, a
    path through a file, a name longer than the file system takes."""
    (directory / "notes.txt").write_text("mine")
    (directory / f"a{suffix}").symlink_to(directory / f"b{suffix}")
    (directory / f"b{suffix}").symlink_to(directory / f"a{suffix}")
    return {
        "loop": (directory / f"a{suffix}", "Too many levels of symbolic links"),
        "under-a-file": (directory / "notes.txt" / f"c{suffix}", "Not a directory"),
        "name-too-long": (directory / ("c" * 300), "File name too long"),
    }[kind]


def need_extra(package: str, extra: str) -> None:
    """Skip a test whose optional package is not installed; under CI (.ci/run installs every extra), fail."""
    if importlib.util.find_spec(package) is not None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must have {package}: .ci/run installs the {extra} extra")
    pytest.skip(f"needs {package}: pip install -e '.[{extra}]'")


@contextmanager
def files_cut_at(limit: int) -> Iterator[None]:
    """Writes past `limit` bytes of any file fail while inside (EFBIG, as on a disk that has filled).

    RLIMIT_FSIZE, lowered for this process and put back after; Python ignores the
    SIGXFSZ that comes with it, so the write raises. Writes from C and Rust fail alike.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@contextmanager
def own_process_group(command: list[str], cwd: Path) -> Iterator[subprocess.Popen]:
    """A job started in a process group of its own (text pipes for its output), and on leaving,
    whatever happened, every process in that group killed: no rank or forked child is left behind."""
    job = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, start_new_session=True
    )
    try:
        yield job
    finally:
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        job.wait()


def looking_back_model(back: int, block_size: int, n_embd: int = 32):
    """One layer, one head, built by hand so that position i can only match position i − back.

    Token embeddings are 0 and position p's embedding is the unit vector e_p, so after the
    layer norm position p is a·e_p − b·1. The query reads dimension p into dimension p − back
    (times 40) and the key reads each dimension as itself: q_i · k_j is largest, by 40·a²,
    at j = i − back.
    """
    import torch

    from tinygpt import GPT, GPTConfig

    T = block_size
    model = GPT(GPTConfig(vocab_size=5, block_size=T, n_layer=1, n_head=1, n_embd=n_embd, bias=False)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (model.h[0].ln_1, model.h[0].ln_2, model.ln_f):
            norm.weight.fill_(1.0)
        model.wpe.weight[:, :T] = torch.eye(T)
        q, k = model.h[0].attn.c_attn.weight[:n_embd], model.h[0].attn.c_attn.weight[n_embd : 2 * n_embd]
        for p in range(back, T):
            q[p - back, p] = 40.0
        k[:T, :T] = torch.eye(T)
    return model


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A tiny run trained for 300 steps on the shared corpus, in a session directory (its run directory)."""
    root = tmp_path_factory.mktemp("tiny_run")
    corpus = root / "corpus.txt"
    corpus.write_text(make_corpus(), encoding="utf-8")
    train(from_dict(tiny_raw(corpus, root / "run", max_iters=300, eval_interval=100)), progress=False)
    return root / "run"
