"""Activation patching (tinygpt.explain.patching): the ends of the scale are where they must be, the batched
runs agree with patching one at a time, and `inspect --patch` prints grids, JSON and one-line errors."""

import json
import re
from html.parser import HTMLParser

import pytest
import torch

import tinygpt
from tinygpt.app.cli import main
from tinygpt.explain.glyphs import quoted
from tinygpt.explain.patching import patched_differences, patching

CLEAN, CORRUPTED = "KING:\nThe king", "KING:\nThe fool"  # the same length, differing at positions 10-13


@pytest.fixture(scope="module")
def lm(odd_checkpoint):
    return tinygpt.load(odd_checkpoint)


@pytest.fixture(scope="module")
def found(lm):
    return patching(lm.model, lm.tokenizer, lm.to_tokens(CLEAN), lm.to_tokens(CORRUPTED), "a", "e")


def test_the_final_stream_at_the_last_position_restores_all_and_earlier_ones_nothing(found):
    assert found.stream_rows()[-1] == "final"
    assert found.streams[-1, -1].item() == pytest.approx(1.0, abs=1e-5)  # the logits read only it
    torch.testing.assert_close(found.streams[-1, :-1], torch.zeros(13), atol=1e-5, rtol=0)


def test_patching_where_the_prompts_agree_changes_nothing(found):
    before = found.streams[:, :10]  # positions 0-9 are the same in both prompts, at every layer
    torch.testing.assert_close(before, torch.zeros_like(before), atol=1e-5, rtol=0)


def test_the_input_at_the_only_position_that_differs_restores_all(lm):
    clean, corrupted = lm.to_tokens("KING:\nThe king"), lm.to_tokens("KING:\nThe kinf")
    one = patching(lm.model, lm.tokenizer, clean, corrupted, "a", "e")
    assert one.streams[0, -1].item() == pytest.approx(1.0, abs=1e-5)  # blocks.0.resid_pre: the whole input
    assert one.streams[-1, -1].item() == pytest.approx(1.0, abs=1e-5)


def one_at_a_time(lm, layer: int, head: int, answer: int, versus: int) -> float:
    """Head layer.head's output patched into a single corrupted run with a hook of the test's own."""
    model = lm.model
    with torch.no_grad():
        _, clean = model.run_with_cache(torch.tensor([lm.to_tokens(CLEAN)]), [f"blocks.{layer}.attn.z"])

        def put(z: torch.Tensor, name: str) -> torch.Tensor:
            z = z.clone()
            z[:, head] = clean[name][:, head]
            return z

        with model.hooks({f"blocks.{layer}.attn.z": put}):
            logits, _ = model(torch.tensor([lm.to_tokens(CORRUPTED)]))
    return float(logits[0, -1, answer] - logits[0, -1, versus])


def test_the_batched_head_patches_are_the_single_runs(lm, found):
    a, v = lm.tokenizer.ids["a"], lm.tokenizer.ids["e"]
    span = found.clean_difference - found.corrupted_difference
    for layer in range(2):
        for head in range(2):
            single = (one_at_a_time(lm, layer, head, a, v) - found.corrupted_difference) / span
            assert found.heads[layer, head].item() == pytest.approx(single, abs=1e-4)


def test_no_patch_is_the_corrupted_run_and_the_plan_is_read_in_order(lm, found):
    clean, corrupted = lm.to_tokens(CLEAN), lm.to_tokens(CORRUPTED)
    a, v = lm.tokenizer.ids["a"], lm.tokenizer.ids["e"]
    assert patched_differences(lm.model, clean, corrupted, [], a, v).numel() == 0
    plan = [("blocks.1.resid_post", 13), ("blocks.0.resid_pre", 0), ("blocks.1.attn.z", 1)]
    d = patched_differences(lm.model, clean, corrupted, plan, a, v)
    assert d.tolist() == pytest.approx(
        [found.clean_difference, found.corrupted_difference, d[2].item()], abs=1e-5
    )


def test_inspect_patch_prints_both_grids_and_json(odd_checkpoint, capsys):
    command = ["inspect", str(odd_checkpoint), "--patch", "--clean", CLEAN, "--corrupted", CORRUPTED]
    assert main([*command, "--answer", "a", "--versus", "e"]) == 0
    text = capsys.readouterr().out
    assert "layer 1 " in text and "head 1" in text and "resid_pre 1 │" in text and "final │" in text
    assert main([*command, "--answer", "a", "--versus", "e", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert set(found) == {
        "clean",
        "corrupted",
        "answer",
        "versus",
        "clean_difference",
        "corrupted_difference",
        "heads",
        "streams",
    }
    assert list(found["heads"]) == ["0.0", "0.1", "1.0", "1.1"]
    assert list(found["streams"]) == ["resid_pre 0", "resid_pre 1", "final"]
    assert all(len(row) == len(CLEAN) for row in found["streams"].values())
    assert found["streams"]["final"][-1] == pytest.approx(1.0, abs=1e-5)


class Grids(HTMLParser):
    """Each table's rows of cell scores (their titles) and cell colours, by the table's class."""

    def __init__(self):
        super().__init__()
        self.scores: dict[str, list[list[float]]] = {}
        self.colours: dict[str, list[str]] = {}
        self.table = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.table = attrs["class"]
            self.scores[self.table], self.colours[self.table] = [], []
        elif tag == "tr" and self.table:
            self.scores[self.table].append([])
        elif tag == "td" and self.table:
            self.scores[self.table][-1].append(float(attrs["title"]))
            self.colours[self.table].append(re.search(r"background:(#\w+)", attrs["style"])[1])

    def handle_endtag(self, tag):
        if tag == "table":
            self.table = None


def test_the_notebook_view_has_both_heatmaps_with_every_score(lm):
    view = lm.patch(CLEAN, CORRUPTED, "a", "e")
    assert view.heads.shape == (2, 2) and view.streams.shape == (3, len(CLEAN))
    grids = Grids()
    grids.feed(view._repr_html_())
    assert sorted(grids.scores) == ["heads", "streams"]
    for name, expected in (("heads", view.heads), ("streams", view.streams)):
        rows = [row for row in grids.scores[name] if row]  # the header row has no scores
        torch.testing.assert_close(torch.tensor(rows), expected, atol=5e-5, rtol=0)  # titles: 4 decimals
    final = grids.colours["streams"][-1]  # the final stream at the last position restores all: full blue
    assert final == "#1f5fbfff" and grids.colours["streams"][0].endswith("00")  # and the first nothing


ERRORS = {
    "prompts-of-different-length": (
        ["--clean", "KING:", "--corrupted", "FOOL:\n"],
        "--clean has 5 characters and --corrupted 6; patching takes activations position by position",
    ),
    "prompt-outside-the-vocabulary": (
        ["--clean", "KING:", "--corrupted", "KINZ:"],
        "1 character(s) not in the model's vocabulary: 'Z'",
    ),
    "answer-outside-the-vocabulary": (
        ["--clean", "KING:", "--corrupted", "FOOL:", "--answer", "Z"],
        "--answer 'Z' is not in the model's vocabulary",
    ),
    "nothing-to-normalise": (
        ["--clean", "KING:", "--corrupted", "KING:", "--answer", "a", "--versus", "e"],
        "the clean and corrupted prompts give the same logit difference",
    ),
    "answer-is-versus": (
        ["--clean", "KING:", "--corrupted", "FOOL:", "--answer", "e", "--versus", "e"],
        "--answer and --versus are both 'e'; a logit difference needs two characters",
    ),
    "patch-without-corrupted": (
        ["--clean", "KING:"],
        "--patch takes its two prompts as --clean and --corrupted",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS), ids=list(ERRORS))
def test_bad_patching_input_is_one_line(odd_checkpoint, capsys, case):
    args, expected = ERRORS[case]
    assert main(["inspect", str(odd_checkpoint), "--patch", *args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and not captured.out, captured.err
    assert expected in lines[0]


def test_an_answer_equal_to_the_default_versus_says_where_versus_came_from(lm, odd_checkpoint, capsys):
    logits, _ = lm.run_with_cache("FOOL:", names=[])
    predicted = lm.tokenizer.chars[int(logits[0, -1].argmax())]  # the corrupted run's prediction
    args = ["--clean", "KING:", "--corrupted", "FOOL:", "--answer", predicted]
    assert main(["inspect", str(odd_checkpoint), "--patch", *args]) == 2
    error = capsys.readouterr().err.strip()
    assert error == (
        f"error: --answer and --versus are both {quoted(predicted)} (--versus by default: the "
        "corrupted run's prediction); a logit difference needs two characters: give --versus"
    )
