import torch

from tinygpt.sampling import sample_next


def draw(logits, n=2000, **kw):
    g = torch.Generator().manual_seed(0)
    return torch.cat([sample_next(logits, generator=g, **kw) for _ in range(n)]).flatten()


def test_temperature_zero_is_argmax():
    logits = torch.tensor([[0.1, 3.0, 2.9], [5.0, 0.0, 0.0]])
    assert sample_next(logits, temperature=0).flatten().tolist() == [1, 0]


def test_top_k_keeps_only_the_k_most_likely():
    logits = torch.log(torch.tensor([[0.1, 0.4, 0.2, 0.3]]))
    assert set(draw(logits, top_k=2).tolist()) == {1, 3}
    assert set(draw(logits, top_k=99).tolist()) == {0, 1, 2, 3}  # more than the vocabulary: all


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([[0.1, 0.5, 0.15, 0.25]]))
    assert set(draw(logits, top_p=0.7).tolist()) == {1, 3}  # 0.5 + 0.25 ≥ 0.7
    assert set(draw(logits, top_p=0.3).tolist()) == {1}  # the most likely always stays
    assert set(draw(logits, top_p=1.0).tolist()) == {0, 1, 2, 3}


def test_sampled_frequencies_follow_the_distribution():
    probs = torch.tensor([[0.2, 0.5, 0.3]])
    counts = torch.bincount(draw(torch.log(probs), n=4000), minlength=3) / 4000
    assert torch.allclose(counts, probs[0], atol=0.03)
