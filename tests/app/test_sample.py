import io
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import train

from tinygpt import load_checkpoint
from tinygpt.app.commands import sample
from tinygpt.errors import UserError
from tinygpt.files.checkpoint import chosen_checkpoint, latest_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from conftest import make_corpus, tiny_raw

    from tinygpt.config.run_config import from_dict

    root = tmp_path_factory.mktemp("sample")
    corpus = root / "corpus.txt"
    corpus.write_text(make_corpus())
    config = from_dict(tiny_raw(corpus, root / "run", max_iters=150, eval_interval=150))
    train(config, progress=False)
    return root / "run" / "best.pt"


def test_streams_prompt_and_continuation(checkpoint):
    out = io.StringIO()
    texts = sample(checkpoint, "KING:", max_new_tokens=40, seed=1, device="cpu", out=out)
    assert len(texts) == 1 and texts[0].startswith("KING:") and len(texts[0]) == 45
    assert out.getvalue() == texts[0] + "\n"


def test_same_seed_same_text_and_greedy_is_deterministic(checkpoint):
    kw = dict(max_new_tokens=60, device="cpu", out=io.StringIO())
    assert sample(checkpoint, "QUEEN:", seed=5, **kw) == sample(checkpoint, "QUEEN:", seed=5, **kw)
    assert sample(checkpoint, "QUEEN:", seed=5, **kw) != sample(checkpoint, "QUEEN:", seed=6, **kw)
    greedy = [sample(checkpoint, "FOOL:", temperature=0, seed=s, **kw) for s in (1, 2)]
    assert greedy[0] == greedy[1]


@pytest.mark.parametrize("temperature", [0, 1.0])
def test_within_the_block_the_cache_changes_nothing(checkpoint, temperature):
    kw = dict(max_new_tokens=11, temperature=temperature, seed=3, device="cpu", out=io.StringIO())
    cached = sample(checkpoint, "KING:", use_cache=True, **kw)  # 5 + 11 characters: block_size 16
    assert cached == sample(checkpoint, "KING:", use_cache=False, **kw)


def test_past_block_size_without_the_cache_each_character_is_the_models_choice_on_the_last_block(checkpoint):
    """Without the cache: an exact window of block_size characters. With it: the same text up to block_size,
    then the cache is refilled from the last half block (tinygpt.generation.sampling), so it may part."""
    kw = dict(max_new_tokens=100, temperature=0, device="cpu", out=io.StringIO())
    (uncached,) = sample(checkpoint, "KING:", use_cache=False, **kw)
    (cached,) = sample(checkpoint, "KING:", use_cache=True, **kw)
    assert len(uncached) == len(cached) == 105 and cached[:16] == uncached[:16]
    model, tokenizer, _ = load_checkpoint(checkpoint)
    ids = tokenizer.encode(uncached)
    with torch.no_grad():
        for i in range(5, len(ids)):
            logits, _ = model(torch.tensor([ids[max(0, i - 16) : i]]))
            assert logits[0, -1].argmax().item() == ids[i], i


def test_several_samples_and_an_empty_prompt(checkpoint):
    texts = sample(checkpoint, "", max_new_tokens=30, num_samples=3, device="cpu", out=io.StringIO())
    assert len(texts) == 3 and all(len(t) == 30 for t in texts)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(prompt="KING: ü"), r"not in the model's vocabulary: 'ü'"),
        (dict(max_new_tokens=-1), "max-new-tokens -1 is negative"),
        (dict(temperature=-0.5), "temperature -0.5 is negative"),
        (dict(top_k=0), "top-k 0 is below 1"),
        (dict(top_p=0.0), r"top-p 0.0 is outside \(0, 1\]"),
        (dict(top_p=1.5), r"top-p 1.5 is outside"),
    ],
)
def test_bad_options(checkpoint, kwargs, message):
    with pytest.raises(UserError, match=message):
        sample(checkpoint, **{"prompt": "KING:", "device": "cpu", "out": io.StringIO(), **kwargs})


def test_top_k_above_vocabulary_keeps_every_character_a_candidate(checkpoint):
    def text(**options) -> str:
        (made,) = sample(checkpoint, "KING:", max_new_tokens=200, device="cpu", out=io.StringIO(), **options)
        return made

    assert text(top_k=10_000) == text(top_k=None)  # the same draws from the same distribution
    assert text(top_k=1) == text(temperature=0)  # while a real cut does cut: one candidate is greedy


def test_latest_checkpoint(tmp_path, checkpoint):
    with pytest.raises(UserError, match="no checkpoint found"):
        latest_checkpoint(tmp_path)
    assert latest_checkpoint(checkpoint.parent.parent) == checkpoint


def test_without_a_checkpoint_the_newest_best_pt_is_used_and_named(tmp_path, checkpoint, monkeypatch, capsys):
    """Two runs under checkpoints/: the newer one's best.pt is sampled, and stderr says which file it was."""
    older = tmp_path / "checkpoints" / "older" / "best.pt"
    newer = tmp_path / "checkpoints" / "newer" / "best.pt"
    for path, when in ((older, 1_000_000), (newer, 2_000_000)):
        path.parent.mkdir(parents=True)
        shutil.copy(checkpoint, path)
        os.utime(path, (when, when))
    monkeypatch.chdir(tmp_path)
    (text,) = sample(prompt="KING:", max_new_tokens=5, device="cpu", out=io.StringIO())
    assert text.startswith("KING:")
    err = capsys.readouterr().err
    assert (
        err == f"using {Path('checkpoints/newer/best.pt')}, the newest best.pt under checkpoints/ "
        "(choose one with --checkpoint)\n"
    )
    assert chosen_checkpoint(older) == older and capsys.readouterr().err == ""  # a given one: nothing said


@pytest.mark.parametrize("temperature", [1e-40, 1e-300], ids=["1e-40", "1e-300"])
def test_a_temperature_below_float32_samples_as_greedy_with_or_without_filters_and_cache(
    checkpoint, temperature
):
    kw = dict(max_new_tokens=40, device="cpu", out=io.StringIO(), seed=3)
    greedy = sample(checkpoint, "KING:", temperature=0, **kw)
    for extra in ({}, {"top_k": 5}, {"top_p": 0.9}, {"use_cache": False}, {"top_k": 3, "top_p": 0.5}):
        assert sample(checkpoint, "KING:", temperature=temperature, **extra, **kw) == greedy, extra
    assert sample(checkpoint, "KING:", temperature=0.8, top_p=1e-320, **kw) == greedy


@pytest.mark.parametrize(
    "option, message",
    [
        ({"temperature": float("nan")}, "--temperature nan is not a number"),
        ({"temperature": float("inf")}, "--temperature inf is not a finite number"),
        ({"temperature": float("-inf")}, "--temperature -inf is negative"),
        ({"seed": -1}, "--seed -1 is not allowed; --seed must be an integer ≥ 0 and ≤ 4294967295"),
        ({"seed": 2**32}, "--seed 4294967296 is not allowed"),
        ({"seed": 2**64}, "--seed 18446744073709551616 is not allowed"),
        ({"seed": 10**30}, "--seed 1000000000000000000000000000000 is not allowed"),
    ],
    ids=[
        "temperature-nan",
        "temperature-inf",
        "temperature-minus-inf",
        "seed-minus-1",
        "seed-2-32",
        "seed-2-64",
        "seed-huge",
    ],
)
def test_temperatures_and_seeds_sampling_cannot_use_are_refused_before_loading(tmp_path, option, message):
    with pytest.raises(UserError, match=re.escape(message)):
        sample(tmp_path / "never-read.pt", "KING:", device="cpu", out=io.StringIO(), **option)


def test_the_seed_range_is_train_seeds(checkpoint):
    from tinygpt.config.run_config import TrainSection

    high = TrainSection.__dataclass_fields__["seed"].metadata["high"]
    kw = dict(max_new_tokens=5, device="cpu", out=io.StringIO())
    assert len(sample(checkpoint, "KING:", seed=high, **kw)[0]) == 10
    assert len(sample(checkpoint, "KING:", seed=0, **kw)[0]) == 10


def test_greedy_samples_print_all_with_a_note_that_they_agree(checkpoint, capsys):
    """--temperature 0 --num-samples 2: both printed, as asked, and one line on stderr says why they agree."""
    out = io.StringIO()
    texts = sample(
        checkpoint, "KING:", max_new_tokens=20, temperature=0, num_samples=2, device="cpu", out=out
    )
    assert texts[0] == texts[1] and out.getvalue().count(texts[0]) == 2
    assert capsys.readouterr().err == (
        "note: --temperature 0 picks the likeliest character each time, so the 2 samples are the same text; "
        "use a temperature above 0 (e.g. 0.8) for different ones\n"
    )
    sample(checkpoint, "KING:", max_new_tokens=20, temperature=0.8, num_samples=2, device="cpu", out=out)
    assert capsys.readouterr().err == ""
