"""The walkthrough: its attention steps on the worked example, and every number of a real walk."""

import math
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import files_cut_at
from test_trace import spread_model

import tinygpt
from tinygpt.app.cli import main
from tinygpt.errors import UserError
from tinygpt.explain.page import page_data
from tinygpt.explain.trace import trace_prompt
from tinygpt.explain.walkthrough import attention_steps, walkthrough
from tinygpt.tokenizer import CharTokenizer

Q = torch.tensor([1.0, 0.5])
K = torch.tensor([[1.0, 0.0], [0.5, 1.0], [1.5, 1.0]])
V = torch.tensor([[0.5, 1.0], [1.0, 0.0], [1.5, 1.0]])
NUMBER = re.compile(r"-?\d+\.\d{4}")


def numbers(line: str) -> list[float]:
    return [float(x) for x in NUMBER.findall(line)]


def truncated(text: str) -> str:
    """A printed 4-decimal number cut to the 3 decimals the published example uses."""
    return text[: text.index(".") + 4]


def test_worked_example_steps_print_the_published_figures():
    lines, a = attention_steps(Q, K, V)
    scores = [line for line in lines if "→ / √2" in line]
    assert [numbers(line)[-1] for line in scores] == [0.7071, 0.7071, 1.4142]
    table = lines[lines.index(next(x for x in lines if x.startswith("5."))) + 2 :][:3]
    printed_weights = [NUMBER.findall(row)[-1] for row in table]
    assert printed_weights == ["0.2483", "0.2483", "0.5035"]
    assert [truncated(w) for w in printed_weights] == ["0.248", "0.248", "0.503"]
    output = next(line for line in lines if line.strip().startswith("output ="))
    assert output.strip() == "output = [1.1276, 0.7517]"
    assert [truncated(x) for x in NUMBER.findall(output)] == ["1.127", "0.751"]
    # the exact values behind the printed figures
    assert a.scores.tolist() == pytest.approx([1 / math.sqrt(2), 1 / math.sqrt(2), math.sqrt(2)], abs=1e-6)
    assert a.weights.tolist() == pytest.approx([0.248255, 0.248255, 0.503490], abs=1e-6)
    assert torch.allclose(a.output, torch.tensor([1.12762, 0.75175]), atol=1e-5)
    assert a.row_max == pytest.approx(math.sqrt(2), abs=1e-6)
    assert a.total == pytest.approx(1 + 2 * math.exp(-1 / math.sqrt(2)), abs=1e-6)


def test_worked_example_from_the_command_line(capsys):
    code = main(
        ["explain", "--q", "1,0.5", "--keys", "1,0", "0.5,1", "1.5,1", "--values", "0.5,1", "1,0", "1.5,1"]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "= 2.0000  → / √2 = 1.4142" in out and "output = [1.1276, 0.7517]" in out
    assert main(["explain", "--q", "1,0.5", "--keys", "1,0,3", "--values", "0.5,1"]) == 2
    assert "as many numbers as the query (2)" in capsys.readouterr().err
    assert main(["explain", "--q", "1,0.5"]) == 2
    assert "go together" in capsys.readouterr().err


def test_masked_positions_get_zero_weight():
    lines, a = attention_steps(Q, K, V, position=1, labels=["'a'", "'b'", "'c'"])
    assert "   2 'c': later, so masked: score −∞, exp(−∞) = 0, weight 0" in lines
    assert a.weights[2] == 0 and a.weights[:2].sum() == pytest.approx(1.0)
    assert not any(line.strip().startswith("2 'c'  0.") for line in lines), "no value row for a masked key"


def fast_path_numbers(model, ids: list[int], layer: int, head: int, token: int) -> dict[str, torch.Tensor]:
    """What the model's ordinary (fused-attention) forward pass computes, caught with forward hooks."""
    caught = {}
    block = model.h[layer]

    def keep(name):
        return lambda module, args, out: caught.update({name: out, name + "_in": args})

    hooks = [
        model.wte.register_forward_hook(keep("wte")),
        model.wpe.register_forward_hook(keep("wpe")),
        block.ln_1.register_forward_hook(keep("ln_1")),
        block.attn.c_attn.register_forward_hook(keep("c_attn")),
        block.attn.c_proj.register_forward_hook(keep("c_proj")),
    ]
    with torch.no_grad():
        logits, _ = model(torch.tensor([ids]))
    for hook in hooks:
        hook.remove()
    hs = model.config.head_size
    q, k, v = (x[0, head] for x in caught["c_attn"])  # (T, hs) each
    scores = (q @ k.T / math.sqrt(hs))[token, : token + 1]  # plain torch, not tinygpt.attention
    merged = caught["c_proj_in"][0][0]  # (T, C): the fused kernel's head outputs side by side
    head_out = merged[token, head * hs : (head + 1) * hs]
    columns = block.attn.c_proj.weight[:, head * hs : (head + 1) * hs]
    x = caught["ln_1_in"][0][0, token]
    return {
        "wte": caught["wte"][0, token],
        "wpe": caught["wpe"][token],
        "x": x,
        "mean": x.mean(),
        "var": x.var(unbiased=False),
        "ln_1": caught["ln_1"][0, token],
        "q": q[token],
        "k": k,
        "v": v,
        "dots": scores * math.sqrt(hs),
        "scores": scores,
        "weights": torch.softmax(scores, dim=0),
        "head_out": head_out,
        "contrib": columns @ head_out,
        "out": caught["c_proj"][0, token],
        "probs": torch.softmax(logits[0, token], dim=0),
    }


def close(printed: list[float], expected: torch.Tensor) -> bool:
    """Printed 4-decimal numbers equal the model's to within their rounding."""
    return torch.allclose(torch.tensor(printed), expected.flatten().float(), atol=6e-5, rtol=0)


def test_every_printed_number_is_the_models_own():
    model = spread_model(vocab_size=6)
    tokenizer = CharTokenizer(["\n", " ", "<", "a", "b", "😀"])
    prompt = "ab <😀\na b"
    ids, layer, head, token, hs = tokenizer.encode(prompt), 1, 1, 5, 4
    text = walkthrough(model, tokenizer, trace_prompt(model, ids), layer, head, token, dims=None)
    lines = text.splitlines()
    want = fast_path_numbers(model, ids, layer, head, token)

    def line(prefix: str) -> list[float]:
        found = [x for x in lines if x.strip().startswith(prefix)]
        assert len(found) == 1, (prefix, found)
        return numbers(found[0])

    assert lines[0].startswith("Following '\\n' (position 5 of 9) through layer 1, head 1.")
    # 1–2: embeddings and layer norm; n_embd-wide vectors show their first d_head entries
    assert close(line("wte['\\n'] ="), want["wte"][:hs])
    assert close(line("wpe[5] ="), want["wpe"][:hs])
    assert close(line("x = wte + wpe ="), (want["wte"] + want["wpe"])[:hs])
    assert close(line("x = ["), want["x"][:hs])
    assert close(line("mean ="), torch.stack([want["mean"], want["var"]]))
    assert close(line("ln_1(x) ="), want["ln_1"][:hs])
    # 3: the head's query, key and value, every dimension
    assert close(line("q ="), want["q"])
    assert close(line("k ="), want["k"][token])
    assert close(line("v ="), want["v"][token])
    # 4: q·k_j written out, its total and the scaled score, for each j ≤ token; later ones masked
    start = lines.index(next(x for x in lines if x.startswith("4.")))
    for j, row in enumerate(lines[start + 1 : start + 2 + token]):
        found = numbers(row)
        terms = torch.stack([want["q"][:3], want["k"][j, :3]], dim=1)  # q_t × k_jt, t < 3
        assert close(found[:6], terms) and f"({hs} terms)" in row
        assert close(found[6:], torch.stack([want["dots"][j], want["scores"][j]]))
    masked = lines[start + 2 + token]
    assert masked == "   6 'a' … 8 'b': later, so masked: score −∞, exp(−∞) = 0, weight 0"
    # 5: softmax, row by row
    start = lines.index(next(x for x in lines if x.startswith("5.")))
    assert close(numbers(lines[start]), want["scores"].max().reshape(1))
    exps = torch.exp(want["scores"] - want["scores"].max())
    shifted = want["scores"] - want["scores"].max()
    for j, row in enumerate(lines[start + 2 : start + 3 + token]):
        assert close(numbers(row), torch.stack([shifted[j], exps[j], want["weights"][j]]))
    assert close(line("sum of exps =")[:1], exps.sum().reshape(1))
    # 6: weight × v_j = weighted row, the head's output, what it adds to the residual stream
    start = lines.index(next(x for x in lines if x.startswith("6.")))
    for j, row in enumerate(lines[start + 1 : start + 2 + token]):
        w, vj = want["weights"][j], want["v"][j]
        assert close(numbers(row), torch.cat([w.reshape(1), vj, w * vj]))
    assert close(line("output ="), want["head_out"])
    assert close(line("through head 1's columns of c_proj"), want["contrib"][:hs])
    assert close(line("all 2 heads and c_proj's bias"), want["out"][:hs])
    # 7: the next-character probabilities
    top = want["probs"].topk(5)
    assert close(numbers(lines[-1]), top.values)
    assert [tokenizer.chars[i] for i in top.indices] == re.findall(
        r"'(.+?)' \d", lines[-1].replace("\\n", "\n"), re.S
    )


def test_dims_limits_long_vectors(odd_checkpoint):
    lm = tinygpt.load(odd_checkpoint)
    text = repr(lm.walkthrough("KING:", layer=0, head=1, token=2, dims=3))
    wte = next(x for x in text.splitlines() if x.strip().startswith("wte["))
    assert len(numbers(wte)) == 3 and "… 29 more]" in wte
    q = next(x for x in text.splitlines() if x.strip().startswith("q ="))
    assert len(numbers(q)) == 3 and "… 13 more]" in q
    default = repr(lm.walkthrough("KING:", layer=0, head=1, token=2))
    q = next(x for x in default.splitlines() if x.strip().startswith("q ="))
    assert len(numbers(q)) == 16, "by default q, k and v show every dimension"


def test_a_negative_token_counts_from_the_end(odd_checkpoint):
    lm = tinygpt.load(odd_checkpoint)
    assert repr(lm.walkthrough("KING:", token=-1)) == repr(lm.walkthrough("KING:"))  # the last
    assert repr(lm.walkthrough("KING:", token=-5)) == repr(lm.walkthrough("KING:", token=0))
    assert repr(lm.backward("KING:", token=-2)) == repr(lm.backward("KING:", token=3))
    with pytest.raises(UserError, match="after --token -1, and the prompt has none after it"):
        lm.backward("KING:", token=-1)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--layer", "2"], "layer 2 does not exist: this model has 2 layers (0 … 1)"),
        (["--head", "-1"], "head -1 does not exist"),
        (["--token", "5"], "--token 5 is outside the prompt: use a position from 0 to 4, or -5 … -1"),
        (["--token", "-6"], "--token -6 is outside the prompt"),
        (["--dims", "0"], "--dims 0 is below 1"),
        (["--prompt", "KING€"], "'€'"),
    ],
)
def test_explain_user_errors(odd_checkpoint, capsys, args, message):
    argv = ["explain", str(odd_checkpoint), "--prompt", "KING:", *args]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command", ["explain", "inspect"])
def test_a_prompt_longer_than_the_context_is_cropped_to_its_last_block_size_characters(
    odd_checkpoint, capsys, command
):
    long = "KING:\nFOOL: yes " * 2  # 32 characters; block_size is 16
    assert main([command, str(odd_checkpoint), "--prompt", long[-16:]]) == 0
    cropped = capsys.readouterr()
    assert cropped.err == ""
    assert main([command, str(odd_checkpoint), "--prompt", long]) == 0
    out, err = capsys.readouterr()
    assert out == cropped.out
    assert err == (
        "note: the prompt has 32 characters, more than this model's block_size of 16; "
        "using its last 16 (positions count from there)\n"
    )
    assert page_data(odd_checkpoint, long)["prompt"] == long[-16:]  # the page, the same rule


def test_html_alone_writes_the_page_into_the_checkpoints_run_directory(odd_checkpoint, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    checkpoint = run / "best.pt"
    shutil.copyfile(odd_checkpoint, checkpoint)
    assert main(["explain", str(checkpoint), "--prompt", "KING", "--html"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {run / 'explain.html'} (")
    assert "KING" in (run / "explain.html").read_text(encoding="utf-8")
    assert sorted(p.name for p in run.iterdir()) == ["best.pt", "cache", "explain.html"]  # none half-done
    assert sorted(p.name.split(".")[0] for p in (run / "cache").iterdir()) == ["heads", *["neurons"] * 2]


def test_html_refuses_a_name_that_is_not_html_so_a_checkpoint_is_never_written_over(
    odd_checkpoint, tmp_path, capsys
):
    checkpoint = tmp_path / "best.pt"
    shutil.copyfile(odd_checkpoint, checkpoint)
    before = checkpoint.read_bytes()
    with pytest.raises(SystemExit) as exited:  # the checkpoint taken as --html's value
        main(["explain", "--html", str(checkpoint)])
    assert exited.value.code == 2
    assert capsys.readouterr().err.endswith(
        f"error: --html '{checkpoint}': the page is an HTML file; give a name ending in .html, "
        "or --html alone to write explain.html beside the checkpoint\n"
    )
    assert checkpoint.read_bytes() == before


def test_a_page_written_onto_a_full_disk_is_one_error_and_leaves_no_partial_file(
    odd_checkpoint, tmp_path, capsys
):
    run = tmp_path / "run"
    run.mkdir()
    checkpoint = Path(shutil.copyfile(odd_checkpoint, run / "best.pt"))
    assert main(["explain", str(checkpoint), "--prompt", "KING", "--html"]) == 0
    page = run / "explain.html"
    before = page.read_bytes()
    capsys.readouterr()
    with files_cut_at(len(before) // 2):  # the new page's write stops half-way
        code = main(["explain", str(checkpoint), "--prompt", "FOOL", "--html"])
    assert code == 2
    err = capsys.readouterr().err  # the progress bar, cleared, then the one error on its line
    assert err.split("\r")[-1] == f"error: cannot write {page}: File too large\n"
    assert "Traceback" not in err and err.count("error:") == 1
    assert page.read_bytes() == before  # the older page, whole
    assert sorted(p.name for p in run.iterdir()) == ["best.pt", "cache", "explain.html"]  # no partial file
    assert sorted(p.name.split(".")[0] for p in (run / "cache").iterdir()) == ["heads", *["neurons"] * 2]
