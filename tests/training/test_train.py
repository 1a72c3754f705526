import json
import os
import re

import pytest
import torch
import yaml
from conftest import tiny_raw, train

import tinygpt.training.loop as training_loop  # where checkpoints are saved
import tinygpt.training.set_up as training_setup  # where the step and the corpus are set up
from tinygpt import GPT, GPTConfig, load_checkpoint
from tinygpt.config.run_config import from_dict
from tinygpt.errors import UserError
from tinygpt.files.checkpoint import read_checkpoint, write_payload
from tinygpt.training.optimizer import make_optimizer
from tinygpt.training.precision import out_of_memory
from tinygpt.training.step import lr_at


def test_training_learns_and_writes_a_complete_run_directory(tiny_config):
    record = train(tiny_config, progress=False)
    run = tiny_config.out_dir
    metrics = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
    assert [m["step"] for m in metrics] == [0, 20, 40, 60]
    assert metrics[-1]["val_loss"] < metrics[0]["val_loss"] - 0.8  # it learned something
    assert metrics[-1]["tokens"] == 60 * 8 * 16
    assert record["step"] == 60 and record["tokens_seen"] == 60 * 8 * 16
    assert record["best_val_loss"] == min(m["val_loss"] for m in metrics)
    assert yaml.safe_load(open(f"{run}/config.yaml")) == tiny_config.to_dict()

    model, tokenizer, saved = load_checkpoint(f"{run}/best.pt")
    assert saved["best_val_loss"] == record["best_val_loss"] and saved["device"] == "cpu"
    assert read_checkpoint(f"{run}/last.pt").optimizer is not None
    assert read_checkpoint(f"{run}/best.pt").optimizer is None  # best.pt is for using the model
    assert "KING" in tokenizer.decode(tokenizer.encode("KING"))


def test_a_run_whose_first_evaluation_stays_its_best_still_leaves_that_best_pt(corpus_file, tmp_path):
    """A constant learning_rate of 1.0 (AdamW moves every weight by about 1 a step) makes every later
    evaluation worse than step 0's: best.pt is the step-0 model. (Decayed to 0.1, the run could recover
    by step 40, and on one thread it did.)"""
    raw = tiny_raw(corpus_file, tmp_path / "run", learning_rate=1.0, min_lr=1.0, warmup_iters=0, max_iters=40)
    raw["train"]["grad_clip"] = 0.5  # large steps, finite losses
    record = train(from_dict(raw), progress=False)
    metrics = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert record["best_step"] == 0 and all(m["val_loss"] > metrics[0]["val_loss"] for m in metrics[1:])
    best = read_checkpoint(tmp_path / "run" / "best.pt")
    assert best.record["step"] == 0 and best.record["best_val_loss"] == metrics[0]["val_loss"]
    torch.manual_seed(raw["train"].get("seed", 1337))  # the weights training started from
    initial = GPT(GPTConfig(**best.model_config)).state_dict()
    assert all(torch.equal(initial[k], best.weights[k]) for k in initial)


def test_gradient_accumulation_matches_one_big_batch(corpus_file, tmp_path):
    """4 micro-batches of 2 take the same step as one batch of 8: the generator draws the same windows."""
    big = tiny_raw(corpus_file, tmp_path / "big", batch_size=8, max_iters=3, eval_interval=100)
    small = tiny_raw(
        corpus_file, tmp_path / "small", batch_size=2, grad_accum_steps=4, max_iters=3, eval_interval=100
    )
    train(from_dict(big), progress=False)
    record = train(from_dict(small), progress=False)
    a = read_checkpoint(tmp_path / "big" / "last.pt").weights
    b = read_checkpoint(tmp_path / "small" / "last.pt").weights
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    assert record["tokens_seen"] == 3 * 8 * 16


def test_resume_continues_from_last_checkpoint(corpus_file, tmp_path):
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=40)
    train(from_dict(raw), progress=False)
    raw["train"]["max_iters"] = 60
    record = train(from_dict(raw), resume=True, progress=False)
    assert record["step"] == 60
    steps = [json.loads(line)["step"] for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert steps == [0, 20, 40, 60]  # the resumed run does not evaluate step 40 twice


def test_run_directory_is_not_overwritten_without_resume(tiny_config):
    train(tiny_config, progress=False)
    with pytest.raises(UserError, match="already holds a run; add --resume"):
        train(tiny_config, progress=False)


def test_resume_without_a_run_is_an_error(tiny_config):
    with pytest.raises(UserError, match="no .*last.pt to resume from"):
        train(tiny_config, resume=True, progress=False)


def test_learning_rate_schedule(tiny_config):
    t = tiny_config.train  # warmup 5, max 60, lr 3e-3 → 3e-4
    assert lr_at(0, t) < lr_at(4, t) < t.learning_rate
    assert lr_at(5, t) == pytest.approx(t.learning_rate)
    assert lr_at(60, t) == pytest.approx(t.min_lr)
    assert lr_at(5, t) > lr_at(30, t) > lr_at(59, t)


def test_weight_decay_only_on_matrices(tiny_config):
    from tinygpt.model import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=2, n_head=2, n_embd=16))
    decay, no_decay = make_optimizer(model, tiny_config.train, torch.device("cpu")).param_groups
    assert all(p.dim() == 2 for p in decay["params"]) and decay["weight_decay"] > 0
    assert all(p.dim() == 1 for p in no_decay["params"]) and no_decay["weight_decay"] == 0
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_bfloat16_autocast_trains_on_cpu(corpus_file, tmp_path):
    record = train(
        from_dict(tiny_raw(corpus_file, tmp_path / "bf16", dtype="bfloat16", max_iters=20)), progress=False
    )
    assert record["dtype"] == "bfloat16" and record["val_loss"] < 3.3  # from 3.7 at step 0


def test_unavailable_devices_and_dtypes_are_user_errors(corpus_file, tmp_path):
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="CUDA is not available"):
            train(from_dict(tiny_raw(corpus_file, tmp_path / "c", device="cuda")), progress=False)
    with pytest.raises(UserError, match="float16 is not supported on CPU"):
        train(from_dict(tiny_raw(corpus_file, tmp_path / "d", dtype="float16")), progress=False)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")  # torch's own import of it
def test_compiled_training_takes_the_same_steps_as_eager(corpus_file, tmp_path):
    runs = {}
    for name, compiled in (("eager", False), ("compiled", True)):
        raw = tiny_raw(corpus_file, tmp_path / name, max_iters=10, eval_interval=5, compile=compiled)
        runs[name] = train(from_dict(raw), progress=False)
    # the same arithmetic in fused kernels: float32 rounding apart, the same losses
    assert runs["compiled"]["val_loss"] == pytest.approx(runs["eager"]["val_loss"], abs=1e-3)
    model, _, record = load_checkpoint(tmp_path / "compiled" / "best.pt")  # saved as the plain model
    assert record["step"] == runs["compiled"]["best_step"] and isinstance(model, GPT)


CPU_ALLOCATOR_FAILURE = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 419430400000 bytes. Error code 12 (Cannot allocate memory)"
)  # torch's own words on CPU


def test_running_out_of_memory_mid_run_is_a_user_error_and_keeps_the_checkpoints(
    corpus_file, tmp_path, monkeypatch
):
    run_step = training_setup.train_step

    def step_then_run_out(*args, **kwargs):
        if len(taken) == 25:  # after the checkpoints of step 20
            raise RuntimeError(CPU_ALLOCATOR_FAILURE)
        taken.append(1)
        return run_step(*args, **kwargs)

    taken = []
    monkeypatch.setattr(training_setup, "train_step", step_then_run_out)
    config = from_dict(tiny_raw(corpus_file, tmp_path / "run"))
    with pytest.raises(UserError, match=r"out of memory on cpu: .* make train.batch_size smaller") as error:
        train(config, progress=False)
    assert f"any checkpoints already in {tmp_path / 'run'} are intact" in str(error.value)
    assert read_checkpoint(tmp_path / "run" / "last.pt").record["step"] == 20
    assert not (tmp_path / "run" / "lock").exists()  # the run directory is free to --resume


def test_out_of_memory_is_told_from_other_runtime_errors():
    assert out_of_memory(RuntimeError(CPU_ALLOCATOR_FAILURE))
    assert out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"))
    assert out_of_memory(RuntimeError("MPS backend out of memory (MPS allocated: 8.00 GB)"))
    assert not out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


def test_resume_repairs_a_best_pt_that_a_failed_save_left_behind_the_record(
    corpus_file, tmp_path, monkeypatch
):
    """The best.pt save after step 20's last.pt fails (a full disk, say): --resume writes it from last.pt."""
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=40)
    run = tmp_path / "run"
    real_save = training_loop.save_checkpoint

    def disk_full_for_best(checkpoint, path):
        if path.name == "best.pt" and checkpoint.record["step"] == 20:
            raise UserError(f"cannot save checkpoint {path}: No space left on device")
        real_save(checkpoint, path)

    monkeypatch.setattr(training_loop, "save_checkpoint", disk_full_for_best)
    with pytest.raises(UserError, match="No space left"):
        train(from_dict(raw), progress=False)
    last = read_checkpoint(run / "last.pt")
    assert last.record["step"] == last.record["best_step"] == 20
    assert read_checkpoint(run / "best.pt").record["step"] == 0  # behind the record
    monkeypatch.setattr(training_loop, "save_checkpoint", real_save)

    raw["train"]["max_iters"] = 20  # resume and end at once: only the repair runs
    record = train(from_dict(raw), resume=True, progress=False)  # the disk has room again
    best = read_checkpoint(run / "best.pt")
    assert best.record["step"] == record["best_step"] == 20
    assert all(torch.equal(best.weights[k], last.weights[k]) for k in last.weights)
    assert best.optimizer is None


@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda p: p["record"].pop("best_step"), "the training record in {last} lacks best_step"),
        (lambda p: p["record"].update(step="20"), "the training record in {last} has a wrong step"),
        (lambda p: p["record"].update(tokens_seen=-1), "in {last} has a wrong tokens_seen"),
        (
            lambda p: p.pop("optimizer"),
            "{last} holds optimizer or random-generator state that this run cannot take up (no 'optimizer')",
        ),
        (lambda p: p["optimizer"].pop("param_groups"), "cannot take up (no 'param_groups')"),
        (lambda p: p["optimizer"]["state"][0].update(exp_avg=torch.zeros(3)), "up (its exp_avg is (3,)"),
        (lambda p: p["optimizer"]["param_groups"].pop(), "cannot take up (loaded state dict has a different"),
        (lambda p: p.pop("rng"), "cannot take up (no 'rng')"),
        (lambda p: p["rng"][0].update(torch=torch.zeros(3)), "cannot take up ("),
    ],
    ids=[
        "record-lacks-a-field",
        "record-step-a-string",
        "record-negative-count",
        "no-optimizer",
        "optimizer-without-groups",
        "optimizer-state-wrong-shape",
        "optimizer-one-group-short",
        "no-rng",
        "rng-malformed",
    ],
)
def test_resuming_from_a_last_pt_with_a_damaged_record_or_state_is_one_error_naming_it(
    corpus_file, tmp_path, damage, said
):
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=20)
    train(from_dict(raw), progress=False)
    last = tmp_path / "run" / "last.pt"
    payload = read_checkpoint(last).to_payload()  # the file's dict, without its digest: written anew
    damage(payload)
    write_payload(payload, last)
    before = last.read_bytes()
    raw["train"]["max_iters"] = 40
    with pytest.raises(UserError) as caught:
        train(from_dict(raw), resume=True, progress=False)
    message = str(caught.value)
    assert said.format(last=last) in message and str(last) in message
    assert message.endswith(
        "--resume needs it: put back a good copy, or move it away to resume from best.pt's weights, "
        "or start afresh with another out_dir"
    )
    assert last.read_bytes() == before  # nothing of the run was changed


def test_resuming_on_a_corpus_whose_characters_changed_is_refused_and_says_how(corpus_file, tmp_path):
    """The corpus gained characters, or swapped one for another (the same vocabulary size): resuming
    would train on other text under the first one's ids, so it is refused, and why is said."""
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=20)
    train(from_dict(raw), progress=False)
    text = corpus_file.read_text()
    grown, swapped = tmp_path / "grown.txt", tmp_path / "swapped.txt"
    grown.write_text(text + "XYZ€\n")
    swapped.write_text(text.replace("q", "Z"))
    size = len(set(text))
    raw["train"]["max_iters"] = 40
    for corpus, change in (
        (grown, f"from {size} to {size + 4} characters (new 'X', 'Y', 'Z', '€')"),
        (swapped, f"from {size} to {size} characters (new 'Z'; gone 'q')"),
    ):
        raw["data"]["corpus"] = str(corpus)
        said = f"changed since {tmp_path / 'run' / 'last.pt'} was trained on it: its vocabulary went {change}"
        with pytest.raises(UserError, match=re.escape(said + "; resume with the text the run trained on")):
            train(from_dict(raw), resume=True, progress=False)


def test_resuming_on_the_corpus_edited_in_place_with_its_modification_time_put_back_is_refused(
    corpus_file, tmp_path
):
    """Edited without changing its length, its mtime restored (cp -p, rsync -t, touch -r): the id cache
    beside it was trusted on size and mtime, so the run resumed, on the old text, under its old digest."""
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=20)
    train(from_dict(raw), progress=False)
    was = corpus_file.stat()
    corpus_file.write_text(corpus_file.read_text().replace(" king ", " fool "))
    os.utime(corpus_file, ns=(was.st_atime_ns, was.st_mtime_ns))
    assert (corpus_file.stat().st_size, corpus_file.stat().st_mtime_ns) == (was.st_size, was.st_mtime_ns)
    raw["train"]["max_iters"] = 40
    said = f"{corpus_file} is not the text {tmp_path / 'run' / 'last.pt'} was trained on (the same characters"
    with pytest.raises(UserError, match=re.escape(said)):
        train(from_dict(raw), resume=True, progress=False)


def test_resuming_on_other_text_of_the_same_characters_is_refused_and_an_older_checkpoint_is_noted(
    corpus_file, tmp_path, capsys
):
    """The corpus edited (the same characters, other contents), or split by another val_fraction: refused,
    where it once trained on and replaced best.pt by a loss measured on other text. A last.pt saved
    before checkpoints recorded the text (format version 2) resumes as before, with a note."""
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=20)
    train(from_dict(raw), progress=False)
    last = tmp_path / "run" / "last.pt"
    before = last.read_bytes()
    edited = tmp_path / "edited.txt"
    edited.write_text("".join(reversed(corpus_file.read_text().splitlines(keepends=True))))
    raw["train"]["max_iters"] = 40
    for change, said in (
        (
            {"corpus": str(edited)},
            f"{edited} is not the text {last} was trained on (the same characters, other",
        ),
        (
            {"val_fraction": 0.5},
            "held out data.val_fraction = 0.1 of its corpus for validation, the config says 0.5",
        ),
    ):
        with pytest.raises(UserError, match=re.escape(said)):
            train(from_dict({**raw, "data": {**raw["data"], **change}}), resume=True, progress=False)
        assert last.read_bytes() == before
    older = read_checkpoint(last).to_payload()
    del older["corpus_digest"]
    write_payload({**older, "format_version": 2}, last)
    assert read_checkpoint(last).corpus_digest is None
    assert train(from_dict(raw), resume=True, progress=False)["step"] == 40
    assert (
        "does not record which text it was trained on (saved by an older tinygpt)" in capsys.readouterr().err
    )
    assert read_checkpoint(last).corpus_digest is not None  # saved again: recorded from now on


def test_the_bar_says_what_holds_it_the_evaluation_and_the_compiling_first_step(
    corpus_file, tmp_path, capsys, monkeypatch
):
    """A bar standing still at 0 steps (the step-0 evaluation, torch.compile's first step) says why.
    torch.compile is made to return the model as it is: what is tested is the words, not the compiler."""
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: model)
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=4, eval_interval=2, compile=True)
    train(from_dict(raw), progress=True)
    bar = capsys.readouterr().err
    assert "evaluating step 0 (4 batches a split)" in bar and "evaluating step 4 (4 batches a split)" in bar
    assert bar.count("compiling the model (first step)") >= 1
    assert bar.index("evaluating step 0") < bar.index("compiling the model") < bar.index("evaluating step 2")
    eager = tiny_raw(corpus_file, tmp_path / "eager", max_iters=4, eval_interval=2)
    train(from_dict(eager), progress=True)
    assert "compiling" not in capsys.readouterr().err


def test_resuming_with_another_model_shape_names_only_the_keys_that_differ(corpus_file, tmp_path):
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=2, eval_interval=2)
    train(from_dict(raw), progress=False)
    raw["model"] |= {"n_embd": 64, "n_layer": 3}
    with pytest.raises(UserError) as caught:
        train(from_dict(raw), resume=True, progress=False)
    assert str(caught.value) == (
        f"--resume: the config's model differs from the one in {tmp_path / 'run' / 'last.pt'} "
        "(model.n_layer: 2 in the run, 3 in the config, model.n_embd: 32 in the run, 64 in the config); "
        "resume with the run's own config.yaml"
    )


def test_the_summary_and_the_bar_show_the_threads_a_pinned_run_uses(corpus_file, tmp_path, capsys):
    before = torch.get_num_threads()
    train(from_dict(tiny_raw(corpus_file, tmp_path / "run", max_iters=10, threads=1)), progress=True)
    shown = capsys.readouterr()
    assert "threads: 1 (train.threads 1)" in shown.out.splitlines()
    assert "threads=1 pinned" in shown.err  # the bar's postfix
    assert torch.get_num_threads() == before  # put back as the run found it


def test_auto_measures_the_first_steps_and_the_bar_shows_the_count_chosen(
    corpus_file, tmp_path, capsys, monkeypatch
):
    """With two threads to choose from, the bar shows one of them once the first steps are measured
    (which one depends on the machine: what is tested is that a count is chosen and shown)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        chosen = []
        real = training_setup.threads_for
        monkeypatch.setattr(  # each step its own measurement (span 0): the probe ends within the 10
            # steps, however short this machine's steps are (a measurement covers 10 ms of them otherwise);
            # both counts measured, however busy the machine's other core is
            training_setup,
            "threads_for",
            lambda *args: chosen.append(real(*args, span=0.0, idle=lambda: None)) or chosen[-1],
        )
        raw = tiny_raw(
            corpus_file, tmp_path / "run", max_iters=10, log_interval=10, timeline=False, threads="auto"
        )
        train(from_dict(raw), progress=True)
        assert torch.get_num_threads() == 2  # put back as the run found it
    finally:
        torch.set_num_threads(before)
    shown = capsys.readouterr()
    assert (
        "threads: auto: measured over the first steps at 1, 2, again when the step time drifts or the idle "
        "cores change" in shown.out
    )
    assert chosen[0].probes == 1 and re.search(rf"threads={chosen[0].chosen}\b", shown.err)
