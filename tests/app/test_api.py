"""The Python API (`import tinygpt`) against the commands: the same numbers, the same one-line errors."""

import html as html_lib
import json
import re

import pytest
import torch
import yaml
from conftest import tiny_raw

import tinygpt
from tinygpt.app.api import overrides_of
from tinygpt.app.cli import main
from tinygpt.explain.heads import checkpoint_heads

PROMPT = "KING:\nThe fo"
NUMBER = re.compile(r"-?\d+\.\d+")


def command(capsys, *argv: str) -> str:
    """What a command prints, run in this process as the command line runs it."""
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_the_heads_table_is_the_commands_and_the_scorers(odd_checkpoint, capsys):
    heads = tinygpt.load(odd_checkpoint).heads()
    printed = json.loads(command(capsys, "inspect", str(odd_checkpoint), "--heads", "--json"))
    assert [r.as_dict() for r in heads.reports] == printed
    assert [r.as_dict() for r in checkpoint_heads(odd_checkpoint).reports] == printed  # read afresh
    assert repr(heads) + "\n" == command(capsys, "inspect", str(odd_checkpoint), "--heads")


def test_switching_a_head_off_costs_what_the_heads_table_says(odd_checkpoint, capsys):
    lm = tinygpt.load(odd_checkpoint)
    printed = json.loads(command(capsys, "inspect", str(odd_checkpoint), "--heads", "--json"))
    base = lm.loss()
    for row in printed:
        with lm.ablate(f"{row['layer']}.{row['head']}"):
            off = lm.loss()
        assert off - base == pytest.approx(row["importance"], abs=1e-6)
    assert lm.loss() == base, "leaving the block switches the heads back on"
    with lm.ablate([(0, 0), (1, 1)], "mean") as same:
        assert same is lm and lm.loss() != base


def test_the_lens_is_the_one_inspect_prints(odd_checkpoint, capsys):
    lens = tinygpt.load(odd_checkpoint).lens(PROMPT)
    printed = command(capsys, "inspect", str(odd_checkpoint), "--prompt", PROMPT, "--lens")
    rows = [line for line in printed.splitlines() if "layer " in line and "→" in line]
    top = lens.probs().topk(5, dim=-1).values  # (L, T, 5)
    shown = torch.tensor([[float(x) for x in NUMBER.findall(row.split("→")[1])] for row in rows])
    want = top.permute(1, 0, 2).reshape(-1, 5)  # the command prints position by position, layer by layer
    assert shown.shape == want.shape and (shown - want).abs().max() < 6e-4
    assert repr(lens) in printed and lens.tokens == list(PROMPT)


def test_the_walkthrough_is_the_one_explain_prints(odd_checkpoint, capsys):
    walk = tinygpt.load(odd_checkpoint).walkthrough(PROMPT, layer=1, head=0, token=8)
    printed = command(
        capsys, "explain", str(odd_checkpoint), "--prompt", PROMPT, "--layer", "1", "--token", "8"
    )
    table = printed.split("5. Softmax")[1].split("sum of exps")[0].splitlines()[2:]
    rows = [line for line in table if re.match(r"\s+\d+ '", line)]  # not the line naming masked keys
    weights = torch.tensor([float(NUMBER.findall(line)[-1]) for line in rows])
    assert (weights - walk.row.weights).abs().max() < 6e-5 and len(weights) == 9
    assert repr(walk) + "\n" == printed
    backward = tinygpt.load(odd_checkpoint).backward(PROMPT, layer=1, head=0, token=8)
    argv = ("explain", str(odd_checkpoint), "--prompt", PROMPT, "--layer", "1", "--token", "8", "--backward")
    assert repr(backward) + "\n" == command(capsys, *argv)
    assert backward.gradients.loss > 0 and backward.gradients.dq.shape == walk.row.output.shape


def test_an_ablated_walkthrough_and_sample_are_the_commands(odd_checkpoint, capsys):
    lm = tinygpt.load(odd_checkpoint)
    with lm.ablate("0.1", "mean"):
        walk, (made,) = lm.walkthrough(PROMPT, 1, 1), lm.sample("KING:", 40, seed=3)
        attention = lm.attention(PROMPT, layer=1)
    ablate = ("--ablate", "0.1", "--ablate-mode", "mean")
    assert repr(walk) + "\n" == command(
        capsys, "explain", str(odd_checkpoint), "--prompt", PROMPT, "--layer", "1", "--head", "1", *ablate
    )
    argv = (
        "sample",
        "--checkpoint",
        str(odd_checkpoint),
        "--prompt",
        "KING:",
        "--max-new-tokens",
        "40",
        "--seed",
        "3",
    )
    assert command(capsys, *argv, *ablate, "--device", "cpu") == made + "\n"
    printed = command(capsys, "inspect", str(odd_checkpoint), "--prompt", PROMPT, "--layer", "1", *ablate)
    assert repr(attention) in printed and "with heads 0.1 switched off (mean)" in printed
    assert lm.sample("KING:", 40, seed=3) != [made], "outside the block every head is on again"


def test_attention_holds_every_heads_weights(odd_checkpoint):
    view = tinygpt.load(odd_checkpoint).attention(PROMPT)
    assert view.weights.shape == (2, 2, len(PROMPT), len(PROMPT))
    assert torch.allclose(view.weights.sum(-1), torch.ones(2, 2, len(PROMPT)))
    assert view.logits.shape == (len(PROMPT), tinygpt.load(odd_checkpoint).tokenizer.vocab_size)


def test_a_cache_of_a_prompt_and_hooks_on_every_call_are_the_models(odd_checkpoint):
    lm = tinygpt.load(odd_checkpoint)
    logits, cache = lm.run_with_cache(PROMPT, "blocks.*.attn.pattern")
    assert sorted(cache) == ["blocks.0.attn.pattern", "blocks.1.attn.pattern"]
    assert torch.allclose(torch.stack([cache[n][0] for n in sorted(cache)]), lm.attention(PROMPT).weights)
    assert torch.allclose(logits[0], lm.attention(PROMPT).logits, atol=1e-5)
    with lm.hooks({"blocks.0.attn.z": lambda z, name: torch.zeros_like(z)}):  # both heads of layer 0 off
        off = lm.sample(PROMPT, max_new_tokens=30, temperature=0)
    with lm.ablate("0.0,0.1"):
        assert lm.sample(PROMPT, max_new_tokens=30, temperature=0) == off
    assert not lm.model.hook_points.active
    with pytest.raises(tinygpt.UserError, match="no hook point is called 'mlp'"):
        lm.run_with_cache(PROMPT, ["mlp"])


@pytest.mark.parametrize(
    "call, argv",
    [
        (lambda lm: lm.walkthrough(PROMPT, layer=2), ["explain", "--prompt", PROMPT, "--layer", "2"]),
        (lambda lm: lm.walkthrough(PROMPT, token=40), ["explain", "--prompt", PROMPT, "--token", "40"]),
        (lambda lm: lm.walkthrough(PROMPT, dims=0), ["explain", "--prompt", PROMPT, "--dims", "0"]),
        (
            lambda lm: lm.backward("KING", token=3),
            ["explain", "--prompt", "KING", "--token", "3", "--backward"],
        ),
        (lambda lm: lm.lens("KING€"), ["inspect", "--prompt", "KING€", "--lens"]),
        (lambda lm: lm.attention(PROMPT, head=5), ["inspect", "--prompt", PROMPT, "--head", "5"]),
        (lambda lm: lm.heads(windows=0), ["inspect", "--heads", "--windows", "0"]),
        (lambda lm: lm.ablate("3.0"), ["sample", "--ablate", "3.0"]),
        (lambda lm: lm.sample(temperature=-1.0), ["sample", "--temperature", "-1"]),
    ],
)
def test_bad_input_raises_the_commands_one_line(odd_checkpoint, capsys, call, argv):
    lm = tinygpt.load(odd_checkpoint)
    with pytest.raises(tinygpt.UserError) as raised:
        call(lm)
    where = ["--checkpoint"] if argv[0] == "sample" else []  # sample names its checkpoint by an option
    assert main([argv[0], *where, str(odd_checkpoint), *argv[1:]]) == 2
    assert capsys.readouterr().err == f"error: {raised.value}\n"


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (
            lambda lm: lm.sample("KING", max_new_tokens="5"),
            "--max-new-tokens '5' (a str) is not a whole number",
        ),
        (
            lambda lm: lm.sample("KING", max_new_tokens=2.5),
            "--max-new-tokens 2.5 (a float) is not a whole number",
        ),
        (lambda lm: lm.sample("KING", seed="x"), "--seed 'x' (a str) is not a whole number"),
        (lambda lm: lm.sample("KING", top_k=2.5), "--top-k 2.5 (a float) is not a whole number"),
        (lambda lm: lm.sample("KING", temperature="hot"), "--temperature 'hot' (a str) is not a number"),
        (lambda lm: lm.sample(["KI", "NG"]), "prompt ['KI', 'NG'] (a list) is not text"),
        (lambda lm: lm.attention(PROMPT, layer="0"), "--layer '0' (a str) is not a whole number"),
        (lambda lm: lm.attention(PROMPT, layer=True), "--layer True (a bool) is not a whole number"),
        (lambda lm: lm.attention(123), "prompt 123 (an int) is not text"),
        (lambda lm: lm.walkthrough(PROMPT, token="1"), "--token '1' (a str) is not a whole number"),
        (lambda lm: lm.walkthrough(PROMPT, head=1.0), "--head 1.0 (a float) is not a whole number"),
        (lambda lm: lm.backward(PROMPT, lr="x"), "--lr 'x' (a str) is not a number"),
        (lambda lm: lm.heads("5"), "--windows '5' (a str) is not a whole number"),
        (lambda lm: lm.loss(2.5), "--windows 2.5 (a float) is not a whole number"),
        (
            lambda lm: lm.ablate(1),
            '--ablate 1 (an int): give heads as text, e.g. "1.0,2.1", or (layer, head) pairs',
        ),
        (
            lambda lm: lm.ablate(["1.0"]),
            "--ablate ['1.0'] (a list): give heads as text, e.g. \"1.0,2.1\", or (layer, head) pairs",
        ),
    ],
)
def test_a_wrong_type_raises_one_line_naming_the_keyword(odd_checkpoint, call, said):
    """A string where a number goes (layer="0", windows="5") raised a TypeError from deep inside
    ("'<=' not supported between instances of 'int' and 'str'", "'int' object is not iterable")."""
    lm = tinygpt.load(odd_checkpoint)
    with pytest.raises(tinygpt.UserError) as raised:
        call(lm)
    assert str(raised.value).startswith(said)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"path": 5}, "checkpoint 5 (an int) is not a path; pass a str or a pathlib.Path"),
        ({"path": ["a.pt"]}, "checkpoint ['a.pt'] (a list) is not a path; pass a str or a pathlib.Path"),
        ({"device": 0}, 'device 0 (an int) is not a device\'s name; pass a str such as "cpu" or "cuda:0"'),
    ],
)
def test_load_with_an_argument_of_the_wrong_type_raises_one_line(odd_checkpoint, kwargs, said):
    """tinygpt.load(5) raised os.fspath's TypeError, and device=0 torch's RuntimeError on a CPU machine."""
    with pytest.raises(tinygpt.UserError, match=re.escape(said)):
        tinygpt.load(**{"path": odd_checkpoint, **kwargs})


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda: tinygpt.train(5), "config 5 (an int) is not a path; pass a YAML file's name or a RunConfig"),
        (lambda: tinygpt.timeline(5), "run 5 (an int) is not a path; pass a str or a pathlib.Path"),
    ],
)
def test_train_and_timeline_given_something_not_a_path_raise_one_line(call, said):
    """tinygpt.train(5) and tinygpt.timeline(5) raised os.fspath's TypeError."""
    with pytest.raises(tinygpt.UserError, match=re.escape(said)):
        call()


def test_load_refuses_what_the_commands_refuse(tmp_path, capsys):
    with pytest.raises(tinygpt.UserError) as raised:
        tinygpt.load(tmp_path / "none.pt")
    assert main(["inspect", str(tmp_path / "none.pt")]) == 2
    assert capsys.readouterr().err == f"error: {raised.value}\n"


@pytest.mark.parametrize("device", ["gpu", "cuda", "mps"], ids=["unknown", "cuda", "mps"])
def test_load_on_a_device_this_machine_lacks_raises_the_commands_one_line(odd_checkpoint, capsys, device):
    """tinygpt.load(path, device="cuda") on a machine without CUDA raised torch's AssertionError (Torch
    not compiled with CUDA enabled), and device="gpu" a RuntimeError listing torch's device types."""
    if (
        device == "cuda"
        and torch.cuda.is_available()
        or device == "mps"
        and torch.backends.mps.is_available()
    ):
        pytest.skip(f"this machine has {device}")
    with pytest.raises(tinygpt.UserError) as raised:
        tinygpt.load(odd_checkpoint, device=device)
    if device == "gpu":
        assert str(raised.value) == "unknown device 'gpu'; use one of auto, cpu, cuda, mps"
    else:
        assert main(["sample", "--checkpoint", str(odd_checkpoint), "--device", device]) == 2
        assert capsys.readouterr().err == f"error: {raised.value}\n"
    assert tinygpt.load(odd_checkpoint, device="cpu:0").model.wte.weight.device.type == "cpu"


def test_train_is_the_command_run_directory_overrides_and_errors_included(corpus_file, tmp_path, capsys):
    raw = tiny_raw(corpus_file, tmp_path / "unused", max_iters=10, eval_interval=5)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    run = tmp_path / "api"
    record = tinygpt.train(
        config, progress=False, out_dir=str(run), train={"max_iters": 6, "eval_interval": 3}
    )
    assert record["step"] == 6 and (run / "best.pt").is_file() and (run / "timeline.jsonl").is_file()
    assert tinygpt.load(run).record["step"] == 6
    assert len(tinygpt.timeline(run).snapshots) == 3  # steps 0, 3 and 6
    cases = [
        ({"out_dir": str(run)}, ["--set", f"out_dir={run}"]),  # the run is there: resume it or move it
        ({"train": {"max_itres": 3}}, ["--set", "train.max_itres=3"]),
        ({"train.learning_rate": -1}, ["--set", "train.learning_rate=-1"]),
    ]
    for overrides, argv in cases:
        with pytest.raises(tinygpt.UserError) as raised:
            tinygpt.train(config, progress=False, **overrides)
        assert main(["train", "--config", str(config), "--quiet", *argv]) == 2
        assert capsys.readouterr().err == f"error: {raised.value}\n", overrides
    record = tinygpt.train(config, resume=True, progress=False, out_dir=str(run), train={"max_iters": 9})
    assert record["step"] == 9


def test_overrides_are_written_as_set_writes_them():
    given = {
        "train": {"max_iters": 3, "compile": False, "device": "cpu"},
        "out_dir": "a b",
        "data.corpus": "x",
    }
    assert overrides_of(given) == [
        "train.max_iters=3",
        "train.compile=false",
        "train.device=cpu",
        "out_dir=a b",
        "data.corpus=x",
    ]


def test_a_views_html_is_the_page_in_a_frame_of_its_own_fetching_nothing(odd_checkpoint):
    view = tinygpt.load(odd_checkpoint).lens(PROMPT)
    first, second = view._repr_html_(), view._repr_html_()
    ids = [re.search(r'<iframe id="([\w-]+)"', html).group(1) for html in (first, second)]
    assert ids[0] != ids[1], "two cells showing one view must not share an id"
    page = html_lib.unescape(re.search(r'srcdoc="([^"]*)"', first).group(1))
    assert page.startswith("<!doctype html>") and "section:not(#prompt-section)" in page
    assert not re.search(r'(src|href)="(https?:)?//', page), "a view fetches nothing"
    heads = tinygpt.load(odd_checkpoint).heads()
    assert "<iframe" not in heads._repr_html_() and heads.reports[0].label in heads._repr_html_()


def test_attention_by_hand_is_explains_worked_example(capsys):
    example = tinygpt.attention_by_hand(
        q=[1, 0.5], keys=[[1, 0], [0.5, 1], [1.5, 1]], values=[[0.5, 1], [1, 0], [1.5, 1]]
    )
    argv = ["explain", "--q", "1,0.5", "--keys", "1,0", "0.5,1", "1.5,1", "--values", "0.5,1", "1,0", "1.5,1"]
    assert repr(example) + "\n" == command(capsys, *argv)
    scores = torch.tensor([1.0, 1.0, 2.0]) / 2**0.5  # q·k_j / √2
    assert torch.allclose(example.row.weights, torch.softmax(scores, dim=0))
    with pytest.raises(tinygpt.UserError, match="every key needs as many numbers as the query"):
        tinygpt.attention_by_hand(q=[1, 0.5], keys=[[1]], values=[[1]])


def test_looking_inside_asks_for_the_cpu_where_its_tensors_are_made(odd_checkpoint):
    lm = tinygpt.load(odd_checkpoint)
    lm.model.to("meta")  # as a model on a GPU: anywhere but the CPU
    for call in (lambda: lm.heads(), lambda: lm.walkthrough(PROMPT), lambda: lm.circuits()):
        with pytest.raises(tinygpt.UserError, match=r"looks inside on the CPU; load the checkpoint with"):
            call()
