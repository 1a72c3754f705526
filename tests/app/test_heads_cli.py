"""inspect --heads / --lens / --ablate and explain --backward / --ablate, from the command line."""

import io
import json
import re

import pytest
from conftest import tiny_raw, train

from tinygpt.app.cli import main
from tinygpt.app.commands import sample
from tinygpt.config.run_config import from_dict
from tinygpt.explain.roles import ROLES


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from conftest import make_corpus

    root = tmp_path_factory.mktemp("heads")
    (root / "corpus.txt").write_text(make_corpus())
    train(from_dict(tiny_raw(root / "corpus.txt", root / "run", max_iters=40)), progress=False)
    return root / "run"


def test_heads_json_has_a_report_for_every_head(run, capsys):
    assert main(["inspect", str(run / "best.pt"), "--heads", "--json", "--windows", "4"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert [(r["layer"], r["head"]) for r in reports] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]  # 2 layers × 2 heads
    for r in reports:
        assert set(r["scores"]) == set(ROLES) and r["label"] in (*ROLES, "mixed")
        assert {"entropy", "importance", "induction_loss"} <= set(r)
    assert main(["inspect", str(run / "best.pt"), "--heads"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:3] == ["head", "prev", "self"] and "importance:" in table


def test_the_lens_and_an_ablation_show_in_inspect(run, capsys):
    best = str(run / "best.pt")
    assert main(["inspect", best, "--prompt", "KING:", "--lens"]) == 0
    out = capsys.readouterr().out
    assert "logit lens" in out and "layer 1 →" in out
    assert main(["inspect", best, "--prompt", "KING:", "--ablate", "1.0,1.1"]) == 0
    ablated = capsys.readouterr().out
    assert "with heads 1.0,1.1 switched off (zero)" in ablated
    table = lambda text: text.split("next characters after each position:")[1].split("logit lens")[0]  # noqa: E731
    assert table(ablated) != table(out)  # other predictions without the last layer's heads


def test_sample_with_heads_switched_off_samples_another_text(run):
    def text(**ablation) -> str:
        (made,) = sample(
            run / "best.pt", "KING:", 300, temperature=1.0, device="cpu", out=io.StringIO(), **ablation
        )
        return made

    every_head = "0.0,0.1,1.0,1.1"
    assert text() == text()  # the same seed: the same text
    assert text(ablate=every_head) != text()
    assert text(ablate=every_head, ablate_mode="mean") not in (text(), text(ablate=every_head))


def test_explain_backward_prints_every_step(run, capsys):
    best = str(run / "best.pt")
    assert main(["explain", best, "--prompt", "KING:", "--layer", "1", "--head", "0", "--backward"]) == 0
    out = capsys.readouterr().out
    for step in (
        "1. dL/dlogits",
        "2. the gradient arriving",
        "4. through the softmax",
        "6. to the query",
        "7. one",
    ):
        assert step in out


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["inspect", "{best}", "--json"],
            "--json prints --heads, --attribution, --patch, --neurons or --features as JSON",
        ),
        (["inspect", "{best}", "--lens"], "add --prompt"),
        (["inspect", "{best}", "--prompt", "K", "--ablate", "5.0"], "layers 0 … 1"),
        (["explain", "{best}", "--prompt", "KING", "--token", "3", "--backward"], "a --token below 3"),
        (["explain", "{best}", "--prompt", "KING", "--backward", "--lr", "-1"], "not a positive number"),
        (["explain", "{best}", "--prompt", "KI", "--ablate", "0.0", "--html", "x.html"], "not the page"),
        (["explain", "{best}", "--prompt", "KI", "--ablate-mode", "mean", "--html"], "not the page"),
        (["inspect", "{best}", "--prompt", "KI", "--ablate-mode", "mean"], "mean says how --ablate switches"),
        (["sample", "--checkpoint", "{best}", "--ablate-mode", "mean"], "add --ablate"),
        (["explain", "{best}", "--prompt", "KI", "--ablate-mode", "zero"], "add --ablate"),
    ],
    ids=[
        "json-without-heads",
        "lens-without-prompt",
        "ablate-no-such-layer",
        "backward-last-token",
        "bad-lr",
        "page",
        "page-mode",
        "inspect-mode-alone",
        "sample-mode-alone",
        "explain-mode-alone",
    ],
)
def test_mistakes_are_one_line(run, capsys, args, message):
    assert main([a.format(best=run / "best.pt") for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


@pytest.mark.parametrize(
    "prompt, token", [("K", None), ("", None), ("K", "0")], ids=["one", "empty", "token-0"]
)
def test_backward_on_a_one_character_prompt_asks_for_a_longer_prompt(run, capsys, prompt, token):
    """It once said `--token -1 is outside the prompt: use a position from 0 to 0`, of a --token never
    given (or, with --token 0, to use a --token below 0)."""
    args = ["explain", str(run / "best.pt"), "--prompt", prompt, "--backward"]
    assert main(args + (["--token", token] if token else [])) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "error: --backward follows the loss of predicting the next character, and a prompt of one "
        "character (an empty prompt is a newline) has none to predict; give a prompt of at least 2 characters"
    )


@pytest.mark.parametrize("where", ["elsewhere", "corpus-gone"], ids=["elsewhere", "corpus-gone"])
def test_heads_of_a_run_whose_corpus_is_not_there_say_where_it_was(tmp_path, monkeypatch, capsys, where):
    """A run trained on a corpus named by a relative path, inspected from another directory (or after the
    corpus was moved), was told to set data.corpus, which inspect has no way to do."""
    from conftest import make_corpus

    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text(make_corpus(200))
    raw = tiny_raw("corpus.txt", tmp_path / "run", max_iters=2, eval_interval=2, eval_iters=1, timeline=False)
    train(from_dict(raw), progress=False)
    if where == "elsewhere":
        (tmp_path / "sub").mkdir()
        monkeypatch.chdir(tmp_path / "sub")
    else:
        (tmp_path / "corpus.txt").rename(tmp_path / "moved.txt")
    here = tmp_path / "sub" if where == "elsewhere" else tmp_path
    what = f"a path relative to the directory training ran in, and {here} holds no corpus.txt"
    fix = "run this from the directory training ran in, or put the corpus back"
    capsys.readouterr()
    best = tmp_path / "run" / "best.pt"
    assert main(["inspect", str(best), "--heads"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"error: {best} was trained on the corpus corpus.txt, {what}; this needs the text the model learned "
        f"from: {fix}"
    )


def test_more_windows_than_the_split_holds_are_refused_before_any_work(run, capsys):
    """--windows 1000000000 once asked torch.linspace for a billion starts (24 GB, then the OOM killer)."""
    assert main(["inspect", str(run / "best.pt"), "--heads", "--windows", "1000000000"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch(
        r"error: --windows 1,000,000,000 is more than the [\d,]+ windows of 17 characters the validation "
        r"split holds; use at most \d+",
        line,
    )
