"""Composition scores (tinygpt.explain.circuits) and head descriptions (tinygpt.explain.describe), each on
heads built by hand so the right answer is known."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from conftest import looking_back_model

from tinygpt import GPT, GPTConfig
from tinygpt.explain.circuits import Factored, baseline, circuits_table, composition, edges, normalised
from tinygpt.explain.describe import BUCKETS, describe, offset_shares, profiles
from tinygpt.model import attention_weights

C, NH, T = 32, 2, 16
ROOT = Path(__file__).resolve().parents[2]


def wired_model() -> GPT:
    """Two layers of two heads, GPT-2's random initialisation, then head 0.1 wired into head 1.0's keys:
    0.1 reads dimension 20 of the stream as its value and writes it into dimension 0; 1.0's key reads
    dimension 0 and its query dimension 24, and nothing else."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=7, block_size=T, n_layer=2, n_head=NH, n_embd=C, bias=False)).eval()
    hs = C // NH
    with torch.no_grad():
        earlier, later = model.h[0].attn, model.h[1].attn
        earlier.c_attn.weight[2 * C + hs : 2 * C + 2 * hs] = 0.0  # 0.1's value rows …
        earlier.c_attn.weight[2 * C + hs, 20] = 1.0  # … one of them reads dimension 20
        earlier.c_proj.weight[:, hs : 2 * hs] = 0.0  # 0.1's output columns …
        earlier.c_proj.weight[0, hs] = 1.0  # … write that value into dimension 0
        later.c_attn.weight[:hs] = 0.0  # 1.0's query rows
        later.c_attn.weight[0, 24] = 1.0
        later.c_attn.weight[C : C + hs] = 0.0  # 1.0's key rows
        later.c_attn.weight[C, 0] = 1.0
    return model


def test_the_wired_pair_composes_most_and_by_its_keys():
    strongest = edges(composition(wired_model()))[0]
    assert (strongest.kind, strongest.source, strongest.target) == ("K", (0, 1), (1, 0))
    assert strongest.score > 0.9  # rank 1 and aligned: ‖q kᵀ o vᵀ‖ = |q| |k·o| |v| ≈ |q| |k| |o| |v|
    runner_up = edges(composition(wired_model()))[1]
    assert runner_up.score < 2 * baseline(C)


@torch.no_grad()
def reading(model: GPT, layer: int, part: int, head: int) -> torch.Tensor:
    """What head `head` of `layer` reads for each basis vector of the stream, through the model's own
    modules: ln_1 without its division by the standard deviation (the mean removed, times its weight),
    then c_attn, then that head's slice of the query (part 0), key (1) or value (2): (hs, C)."""
    block = model.h[layer].attn
    x = torch.eye(C)  # (C, C): one basis vector per row
    x = (x - x.mean(dim=-1, keepdim=True)) * model.h[layer].ln_1.weight
    q, k, v = block.c_attn(x.view(1, C, C))  # 3 × (1, nh, C, hs)
    return (q, k, v)[part][0, head].T  # (hs, C)


@torch.no_grad()
def writing(model: GPT, layer: int, head: int) -> torch.Tensor:
    """What head `head` of `layer` adds to the stream for each basis vector of its value: (C, hs)."""
    hs = C // NH
    merged = torch.zeros(hs, C)
    merged[:, head * hs : (head + 1) * hs] = torch.eye(hs)  # the head's output alone, one dimension a row
    return model.h[layer].attn.c_proj(merged).T  # (C, hs)


def test_the_scores_are_the_normalised_frobenius_norms_of_the_products_computed_directly():
    model = wired_model()
    scores = composition(model)
    W_QK = reading(model, 1, 0, 0).T @ reading(model, 1, 1, 0)  # (C, C): query and key of head 1.0
    W_OV_later = writing(model, 1, 0) @ reading(model, 1, 2, 0)
    W_OV = writing(model, 0, 1) @ reading(model, 0, 2, 1)  # head 0.1

    def score(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(
            torch.linalg.matrix_norm(a @ b) / (torch.linalg.matrix_norm(a) * torch.linalg.matrix_norm(b))
        )

    assert float(scores["Q"][0, 1, 1, 0]) == pytest.approx(score(W_QK.T, W_OV), rel=1e-4)
    assert float(scores["K"][0, 1, 1, 0]) == pytest.approx(score(W_QK, W_OV), rel=1e-4)
    assert float(scores["V"][0, 1, 1, 0]) == pytest.approx(score(W_OV_later, W_OV), rel=1e-4)
    assert scores["K"][1, 0, 0, 1].isnan()  # a later head does not write into an earlier one


def test_two_random_matrices_score_about_one_over_root_c():
    g = torch.Generator().manual_seed(0)
    later = Factored(torch.randn(64, C, C, generator=g), torch.eye(C).expand(64, C, C))
    earlier = Factored(torch.randn(1, C, C, generator=g), torch.eye(C).expand(1, C, C))
    assert float(normalised(later, earlier).mean()) == pytest.approx(baseline(C), rel=0.1)


def test_factored_norms_are_the_norms_of_the_products():
    g = torch.Generator().manual_seed(1)
    later = Factored(torch.randn(3, C, 4, generator=g), torch.randn(3, 4, C, generator=g))
    earlier = Factored(torch.randn(2, C, 5, generator=g), torch.randn(2, 5, C, generator=g))
    full_later, full_earlier = later.left @ later.right, earlier.left @ earlier.right  # (3, C, C), (2, C, C)
    assert torch.allclose(later.norm(), torch.linalg.matrix_norm(full_later), rtol=1e-5)
    assert torch.allclose(later.T.left @ later.T.right, full_later.transpose(-1, -2))
    direct = torch.linalg.matrix_norm(full_later.unsqueeze(1) @ full_earlier.unsqueeze(0))  # (3, 2)
    direct = direct / (torch.linalg.matrix_norm(full_later)[:, None] * torch.linalg.matrix_norm(full_earlier))
    assert torch.allclose(normalised(later, earlier), direct, rtol=1e-4)


def test_a_one_layer_model_has_nothing_to_compose():
    model = GPT(GPTConfig(vocab_size=5, block_size=8, n_layer=1, n_head=2, n_embd=8))
    assert "nothing composes" in circuits_table(model, avoid=[])


# ---------------------------------------------------------------- descriptions


def offset_model(back: int) -> GPT:
    return looking_back_model(back, T, C)


def test_a_head_built_to_look_three_back_is_described_so():
    ids = torch.randint(5, (4, T), generator=torch.Generator().manual_seed(0))
    (weights,) = attention_weights(offset_model(3), ids)
    (profile,) = profiles(weights, ids, list("abcde"))
    assert profile.offsets[BUCKETS.index((3, 3))] == pytest.approx((T - 3) / T, abs=0.01)  # every query ≥ 3
    assert describe(profile).startswith("looks 3 back 81%")
    assert "no character preferred" in describe(profile)  # the characters are random


def test_a_head_that_attends_to_one_character_is_described_so():
    """Weights built by hand: each query spreads its attention evenly over the earlier 'x's (itself
    when there is none); 'x' is one character in five."""
    ids = torch.randint(5, (8, T), generator=torch.Generator().manual_seed(1))  # 'x' is id 4
    weights = torch.zeros(8, 1, T, T)
    for n in range(8):
        for i in range(T):
            xs = [j for j in range(i + 1) if ids[n, j] == 4] or [i]
            weights[n, 0, i, xs] = 1 / len(xs)
    (profile,) = profiles(weights, ids, list("abcdx"))
    assert profile.targets[0][0] == "x" and profile.targets[0][1] > 0.5  # the rest: queries before any x
    words = describe(profile, cost=0.25)
    assert "mostly at 'x'" in words and words.endswith("off costs +0.250 nats")


def test_offset_shares_add_up_to_one_per_head():
    weights = torch.softmax(
        torch.randn(3, 2, T, T).masked_fill(torch.ones(T, T).triu(1).bool(), -1e9), dim=-1
    )
    assert offset_shares(weights).sum(dim=1) == pytest.approx(torch.ones(2), abs=1e-5)


def test_inspect_circuits_prints_the_edges_and_the_knockouts_and_stands_alone(odd_checkpoint, capsys):
    from tinygpt.app.cli import main

    assert main(["inspect", str(odd_checkpoint), "--circuits"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["kind", "from", "into", "score"]
    assert "two random matrices score about" in out and "for induction (the best of layers 1 and up)" in out
    assert main(["inspect", str(odd_checkpoint), "--circuits", "--heads"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("--circuits is a view of its own: drop --heads and --prompt, or --circuits")
    )


def test_the_readme_and_the_guide_quote_the_seeds_figures_the_script_wrote():
    """README.md's timing and docs/circuits.md's seeds tables are what scripts/induction_seeds.py measured
    (docs/circuits_figures.json for the shipped recipe, docs/circuits_seeds_adamw.json for the former AdamW
    one), as scripts/circuit_figures.py writes them: no figure copied by hand."""
    script = figures_script()
    figures = json.loads((ROOT / "docs" / "circuits_figures.json").read_text(encoding="utf-8"))
    guide = (ROOT / "docs" / "circuits.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert script.seed_block(figures) in guide
    adamw = json.loads((ROOT / "docs" / "circuits_seeds_adamw.json").read_text(encoding="utf-8"))
    assert adamw["changes"][0] == "train.optimizer=adamw" and figures.get("changes", []) == []
    assert script.seed_block(adamw) in guide
    for threads in {r["threads"] for r in figures["runs"]}:
        assert script.timing(figures, threads) in readme


def figures_script():
    spec = importlib.util.spec_from_file_location("circuit_figures", ROOT / "scripts" / "circuit_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_figures_block_is_filled_whether_empty_or_not_and_nothing_after_it_moves():
    replace_block = figures_script().replace_block
    doc = (
        "a\n<!-- figures: x -->\n<!-- /figures -->\nkept\n"
        "<!-- figures: y -->\nold\nlines\n<!-- /figures -->\nend\n"
    )
    filled = replace_block(doc, "x", "new")
    assert filled == doc.replace("<!-- figures: x -->\n", "<!-- figures: x -->\nnew\n")
    assert replace_block(filled, "x", "newer") == filled.replace("\nnew\n", "\nnewer\n")
    assert replace_block(doc, "y", "one") == doc.replace("old\nlines\n", "one\n")


def test_knockouts_in_one_batch_are_each_earlier_head_switched_off_in_turn():
    from tinygpt.explain.ablate import ablated
    from tinygpt.explain.circuits import knockouts
    from tinygpt.explain.heads import induction_probes
    from tinygpt.explain.roles import induction_scores

    torch.manual_seed(2)
    model = GPT(GPTConfig(vocab_size=9, block_size=16, n_layer=3, n_head=3, n_embd=24)).eval()
    found = knockouts(model, avoid=[0])
    layer, head = found.target
    assert list(found.without) == [(i, a) for i in range(layer) for a in range(3)]
    probes = induction_probes(9, 16, avoid=[0])
    for source, score in found.without.items():  # the loop the batch replaces
        with ablated(model, [source]):
            expected = induction_scores(attention_weights(model, probes)[layer])[head]
        assert score == pytest.approx(float(expected), abs=1e-4)
