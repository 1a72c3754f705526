import math

import pytest
import torch
import torch.nn.functional as F

from tinygpt import GPT, GPTConfig, load_checkpoint
from tinygpt.app.cli import main
from tinygpt.app.evaluate import evaluate_checkpoint, split_loss
from tinygpt.config.run_config import from_dict
from tinygpt.data.corpus import load_corpus
from tinygpt.files.checkpoint import read_checkpoint


def small_model(block_size: int = 8) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=13, block_size=block_size, n_layer=2, n_head=2, n_embd=16))


def window_by_window(model: GPT, ids: torch.Tensor) -> float:
    """The definition, one window at a time: targets ids[1:], windows of block_size from the start."""
    total, count, T = 0.0, 0, model.config.block_size
    for start in range(0, len(ids) - 1, T):
        x = ids[start : min(start + T, len(ids) - 1)].long()
        y = ids[start + 1 : start + 1 + len(x)].long()
        logits, _ = model(x.unsqueeze(0))
        total += F.cross_entropy(logits[0], y, reduction="sum").item()
        count += len(y)
    assert count == len(ids) - 1  # every character after the first is a target once
    return total / count


@pytest.mark.parametrize("length", [2, 8, 9, 50, 57])  # shorter than, equal to and past whole windows
@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_split_loss_is_the_mean_over_every_target_once(length, batch_size):
    model = small_model().eval()
    ids = torch.randint(13, (length,), generator=torch.Generator().manual_seed(length), dtype=torch.int32)
    expected = window_by_window(model, ids)
    assert split_loss(model, ids, batch_size=batch_size, progress=False) == pytest.approx(expected, rel=1e-5)


def test_a_model_that_predicts_uniformly_scores_log_vocab():
    model = small_model()
    with torch.no_grad():
        model.wte.weight.zero_()  # the tied LM head now gives every character the same logit
    ids = torch.randint(13, (101,))
    assert split_loss(model, ids, batch_size=4, progress=False) == pytest.approx(math.log(13), rel=1e-6)


def test_split_loss_leaves_the_mode_alone_and_runs_without_dropout():
    model = GPT(GPTConfig(vocab_size=13, block_size=8, n_layer=1, n_head=1, n_embd=8, dropout=0.5))
    ids = torch.randint(13, (40,))
    model.train()
    first = split_loss(model, ids, progress=False)
    assert model.training
    assert split_loss(model, ids, progress=False) == first  # deterministic: dropout was off


def test_a_split_needs_two_characters():
    with pytest.raises(ValueError, match="at least two"):
        split_loss(small_model(), torch.tensor([3]), progress=False)


def test_bfloat16_autocast_gives_nearly_the_same_loss():
    model = small_model()
    ids = torch.randint(13, (200,))
    exact = split_loss(model, ids, progress=False)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    assert split_loss(model, ids, autocast=autocast, progress=False) == pytest.approx(exact, abs=0.02)


def run_config(checkpoint):
    return from_dict(read_checkpoint(checkpoint).config)


@pytest.mark.parametrize("split", ["val", "train"])
def test_evaluate_command_prints_split_loss_of_the_runs_own_corpus(odd_checkpoint, capsys, split):
    model, _, record = load_checkpoint(odd_checkpoint)
    corpus = load_corpus(run_config(odd_checkpoint).data, model.config.block_size)
    expected = split_loss(model, getattr(corpus, split), batch_size=5, progress=False)

    result = evaluate_checkpoint(odd_checkpoint, split=split, batch_size=5, device="cpu", progress=False)
    assert result.loss == pytest.approx(expected, rel=1e-12)
    assert result.characters == len(getattr(corpus, split)) and result.step == record["step"]

    assert main(["evaluate", str(odd_checkpoint), "--split", split, "--device", "cpu", "--quiet"]) == 0
    name = {"val": "validation", "train": "training"}[split]
    assert capsys.readouterr().out == (
        f"{odd_checkpoint} (step {record['step']}): loss {expected:.4f} on the {name} split of "
        f"{corpus.path} ({len(getattr(corpus, split)):,} characters, each after the first predicted once)\n"
    )


def test_another_corpus_is_scored_in_the_checkpoints_own_ids(odd_checkpoint, tmp_path):
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    text = "KING:\nTo be the king and yet not be the king.\n" * 40  # fewer characters than the vocabulary
    path = tmp_path / "other.txt"
    path.write_text(text, encoding="utf-8")
    val_fraction = run_config(odd_checkpoint).data.val_fraction
    val = torch.tensor(tokenizer.encode(text[int(len(text) * (1 - val_fraction)) :]))

    result = evaluate_checkpoint(odd_checkpoint, corpus=str(path), device="cpu", progress=False)
    assert result.corpus == path and result.characters == len(val)
    assert result.loss == pytest.approx(split_loss(model, val, progress=False), rel=1e-12)


def test_evaluate_errors_are_one_line(odd_checkpoint, tmp_path, capsys):
    foreign = tmp_path / "foreign.txt"
    foreign.write_text("KING€ " * 100, encoding="utf-8")
    short = tmp_path / "short.txt"
    short.write_text("K", encoding="utf-8")
    cases = [
        (
            ["--corpus", str(foreign)],
            f"corpus {foreign} has 1 character(s) the checkpoint's vocabulary lacks: '€'",
        ),
        (
            ["--corpus", str(tmp_path / "none.txt")],
            f"corpus file {tmp_path / 'none.txt'} does not exist; pass --corpus a UTF-8 text file",
        ),
        (  # the model's block is set: no advice to train with a smaller one, and "1 character"
            ["--corpus", str(short)],
            f"corpus {short} has 1 character, fewer than model.block_size + 1 = 17; "
            "pass --corpus a longer text",
        ),
        (["--batch-size", "0"], "--batch-size 0 is below 1; use 1 or more"),
    ]
    for extra, message in cases:
        assert main(["evaluate", str(odd_checkpoint), "--device", "cpu", "--quiet", *extra]) == 2
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        assert out == "" and len(lines) == 1 and lines[0].startswith(f"error: {message}"), err
    assert main(["evaluate", str(tmp_path / "missing.pt")]) == 2
    assert capsys.readouterr().err.startswith(f"error: checkpoint {tmp_path / 'missing.pt'} does not exist")
