"""The backward walkthrough's every gradient against torch.autograd, in float64."""

import math

import pytest
import torch
import torch.nn.functional as F

from tinygpt import GPT, GPTConfig
from tinygpt.explain.backward import (
    backward_steps,
    head_output_gradients,
    row_backward,
    step_effect,
    step_effects,
)


def model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=9, block_size=12, n_layer=2, n_head=2, n_embd=16)).eval()


NAMES = {"q": "q", "weights": "pattern", "heads": "z"}  # what this file calls them: the hook points' names


def autograd_of_the_full_model(m: GPT, ids: list[int], layer: int, head: int, i: int) -> dict:
    """The same loss, differentiated by autograd through the whole float64 model."""
    exact = GPT(m.config).double().eval()
    exact.load_state_dict({k: v.double() for k, v in m.state_dict().items()})
    logits, found = exact.run_with_cache(torch.tensor([ids[: i + 1]]), names=[f"blocks.{layer}.attn.*"])
    logits.retain_grad()
    rec = {name: found[f"blocks.{layer}.attn.{site}"] for name, site in NAMES.items()}
    for name in ("q", "weights", "heads"):
        rec[name].retain_grad()
    F.cross_entropy(logits[0, i], torch.tensor(ids[i + 1])).backward()
    return {
        "dlogits": logits.grad[0, i],
        "g": rec["heads"].grad[0, head, i],
        "dw": rec["weights"].grad[0, head, i],
        "dq": rec["q"].grad[0, head, i],
    }


@pytest.mark.parametrize("layer, head, i", [(0, 1, 6), (1, 0, 9), (1, 1, 0)])
def test_every_gradient_equals_autograds(layer, head, i):
    m = model()
    ids = torch.randint(9, (12,), generator=torch.Generator().manual_seed(1)).tolist()
    rb = row_backward(m, ids, layer, head, i)
    ref = autograd_of_the_full_model(m, ids, layer, head, i)
    for name in ("dlogits", "g", "dw", "dq"):
        assert torch.allclose(getattr(rb, name), ref[name], atol=1e-9, rtol=0), name
    # the softmax, the scale and the keys and values through row i: autograd on that row alone
    s = (rb.k @ rb.q / math.sqrt(rb.q.numel())).requires_grad_()
    (torch.softmax(s, dim=-1) @ rb.v).backward(rb.g)
    assert torch.allclose(rb.ds, s.grad, atol=1e-9, rtol=0)
    q, k, v = (t.clone().requires_grad_() for t in (rb.q, rb.k, rb.v))
    (torch.softmax(k @ q / math.sqrt(q.numel()), dim=-1) @ v).backward(rb.g)
    assert torch.allclose(rb.dq, q.grad, atol=1e-9, rtol=0)
    assert torch.allclose(rb.dk, k.grad, atol=1e-9, rtol=0)
    assert torch.allclose(rb.dv, v.grad, atol=1e-9, rtol=0)
    assert torch.allclose(rb.ddot * math.sqrt(rb.q.numel()), rb.ds, atol=1e-12)


def test_the_printed_walkthrough_shows_the_numbers_computed():
    m = model()
    ids = [1, 2, 3, 4, 5]
    rb = row_backward(m, ids, 1, 0, 3)
    text = "\n".join(backward_steps(rb, [f"'{c}'" for c in "abcd"], None, list("abcdefghi")))
    assert f"L = −ln p = {rb.loss:.4f}" in text
    assert f"{rb.ds[2].item():.4f}" in text and f"{rb.dq[0].item():.4f}" in text


def test_a_small_step_down_the_gradient_lowers_the_loss():
    m = model()
    ids = [1, 2, 3, 4, 5, 6]
    step = step_effect(m, ids, 1, 1, 4, lr=0.05)
    assert step.before.shape == step.after.shape == (5,) and not torch.equal(step.before, step.after)
    assert step.loss_after < step.loss


def one_step_by_hand(
    m: GPT, ids: list[int], layer: int, head: int, i: int, lr: float, stepped=("weight", "bias")
) -> tuple:
    """Step 7 on a fresh float64 copy: the loss at i, backward, step the head's 3·d rows of c_attn's
    weight and bias (q, k, v: each d rows, C apart), run again.
    Returns (weights before, weights after, loss before, loss after)."""
    exact = GPT(m.config).double().eval()
    exact.load_state_dict({k: v.double() for k, v in m.state_dict().items()})
    c, d = m.config.n_embd, m.config.head_size
    rows = [part * c + head * d + r for part in range(3) for r in range(d)]

    def run():
        pattern = f"blocks.{layer}.attn.pattern"
        logits, found = exact.run_with_cache(torch.tensor([ids[: i + 1]]), names=[pattern])
        return found[pattern][0, head, i], F.cross_entropy(logits[0, i], torch.tensor(ids[i + 1]))

    before, loss = run()
    loss.backward()
    with torch.no_grad():
        for name in stepped:
            p = getattr(exact.h[layer].attn.c_attn, name)
            p[rows] -= lr * p.grad[rows]
        after, loss_after = run()
    return before.detach(), after, loss.item(), loss_after.item()


def test_one_pass_over_every_head_and_position_steps_each_as_if_alone():
    m = model()
    ids = torch.randint(9, (8,), generator=torch.Generator().manual_seed(3)).tolist()
    heads = [(layer, head) for layer in range(2) for head in range(2)]
    steps = list(step_effects(m, ids, 0.3, range(7), heads))
    assert [(s.i, s.layer, s.head) for s in steps] == [(i, *lh) for i in range(7) for lh in heads]
    for s in steps:
        before, after, loss, loss_after = one_step_by_hand(m, ids, s.layer, s.head, s.i, 0.3)
        assert torch.allclose(s.before, before, atol=1e-12, rtol=0)
        assert torch.allclose(s.after, after, atol=1e-12, rtol=0), (s.i, s.layer, s.head)
        assert s.loss == pytest.approx(loss, abs=1e-12) and s.loss_after == pytest.approx(
            loss_after, abs=1e-12
        )
    assert any(not torch.equal(s.before, s.after) for s in steps)


def test_the_heads_of_a_layer_stepped_in_one_batch_are_each_stepped_alone():
    """Three heads a layer, some asked, out of order: each as one_step_by_hand steps it on its own."""
    torch.manual_seed(1)
    m = GPT(GPTConfig(vocab_size=9, block_size=12, n_layer=2, n_head=3, n_embd=24)).eval()
    ids = torch.randint(9, (10,), generator=torch.Generator().manual_seed(4)).tolist()
    heads = [(1, 2), (0, 0), (1, 0), (0, 2)]
    steps = list(step_effects(m, ids, 0.5, [8, 2], heads))
    assert [(s.i, s.layer, s.head) for s in steps] == [(i, *lh) for i in (8, 2) for lh in heads]
    for s in steps:
        before, after, loss, loss_after = one_step_by_hand(m, ids, s.layer, s.head, s.i, 0.5)
        assert torch.allclose(s.before, before, atol=1e-12, rtol=0)
        assert torch.allclose(s.after, after, atol=1e-12, rtol=0), (s.i, s.layer, s.head)
        assert s.loss == pytest.approx(loss, abs=1e-12)
        assert s.loss_after == pytest.approx(loss_after, abs=1e-12)
    assert len({s.loss_after for s in steps if s.i == 8}) == len(heads)  # each copy its own head's step


def test_in_float32_the_panels_numbers_are_the_float64_ones_to_well_within_float16s_rounding():
    """What a page that keeps the backward panel in float16 computes it in (page.computed_in): float32,
    whose error must stay far below the 1e-3 float16 keeps of a weight or a loss near 2."""
    m = model()
    ids = torch.randint(9, (10,), generator=torch.Generator().manual_seed(5)).tolist()
    heads = [(layer, head) for layer in range(2) for head in range(2)]
    exact = list(step_effects(m, ids, 0.3, range(9), heads))
    single = list(step_effects(m, ids, 0.3, range(9), heads, torch.float32))
    assert single[0].after.dtype == torch.float32 and exact[0].after.dtype == torch.float64
    for a, b in zip(exact, single, strict=True):
        assert (a.i, a.layer, a.head) == (b.i, b.layer, b.head)
        assert torch.allclose(a.after, b.after.double(), atol=1e-5, rtol=0)
        assert a.loss_after == pytest.approx(b.loss_after, abs=1e-5)
    assert any(not torch.equal(s.before, s.after) for s in single)
    g32, g64 = head_output_gradients(m, ids, torch.float32), head_output_gradients(m, ids)
    assert g32.dtype == torch.float32 and torch.allclose(g32.double(), g64, atol=1e-6, rtol=0)


def test_the_step_moves_the_bias_rows_too():
    m = model()
    assert m.config.bias
    step = step_effect(m, [1, 2, 3, 4, 5], 0, 1, 3, lr=5.0)
    weight_only = one_step_by_hand(m, [1, 2, 3, 4, 5], 0, 1, 3, 5.0, stepped=("weight",))
    assert (step.after - weight_only[1]).abs().max().item() > 1e-6


def test_the_pages_gradients_for_every_position_equal_autograds():
    m = model()
    ids = torch.randint(9, (12,), generator=torch.Generator().manual_seed(2)).tolist()
    g = head_output_gradients(m, ids)  # (T − 1, n_layer, n_head, head_size), one position at a time
    assert g.shape == (11, 2, 2, 8) and g.dtype == torch.float64
    for i in range(11):
        for layer in range(2):
            for head in range(2):
                expected = autograd_of_the_full_model(m, ids, layer, head, i)["g"]
                assert (g[i, layer, head] - expected).abs().max().item() < 1e-12, (i, layer, head)
    assert g.abs().sum() > 0
    assert head_output_gradients(m, ids[:1]).shape == (0, 2, 2, 8), "one character: no loss to follow"
