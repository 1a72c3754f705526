"""The TopK dictionary: it recovers a known sparse dictionary, keeps its invariants, AuxK revives the dead.

The synthetic layer has 64 true directions in 32 numbers, not 16: in 16 they overlap so much
that no linear encoder picks the right 3 of 64 reliably (measured: 98% of the directions found
at cosine > 0.9, yet explained variance stops near 0.86).
"""

import math

import pytest
import torch

from tinygpt.explain.dictionary import (
    TopKDictionary,
    initialised,
    quality,
    schedule,
    step,
    train_dictionary,
)

D, TRUE, ACTIVE = 32, 64, 3  # the synthetic layer: 64 true unit directions in 32 numbers, 3 active per row


def true_directions() -> torch.Tensor:
    directions = torch.randn(TRUE, D, generator=torch.Generator().manual_seed(123))  # (TRUE, D)
    return directions / directions.norm(dim=1, keepdim=True)


def synthetic(rows: int, seed: int) -> torch.Tensor:
    """(rows, D): each row the sum of ACTIVE distinct true directions, magnitudes in [0.5, 1.5), plus 1."""
    g = torch.Generator().manual_seed(seed)
    chosen = torch.rand(rows, TRUE, generator=g).argsort(dim=1)[
        :, :ACTIVE
    ]  # (rows, ACTIVE), distinct per row
    magnitudes = 0.5 + torch.rand(rows, ACTIVE, generator=g)
    x = (magnitudes.unsqueeze(-1) * true_directions()[chosen]).sum(dim=1)  # (rows, D)
    return x + 1.0  # an offset for b_dec to find


def batches(count: int, rows: int = 512, seed: int = 0) -> list[torch.Tensor]:
    return list(synthetic(count * rows, seed).split(rows))


@pytest.fixture(scope="module")
def trained() -> tuple[TopKDictionary, dict]:
    return train_dictionary(batches(400), D, n=128, k=ACTIVE, steps=400, lr=1e-2, seed=0)


def test_the_trained_dictionary_recovers_the_true_directions_and_explains_held_out_rows(trained):
    dictionary, record = trained
    held_out = synthetic(4096, seed=99)
    measured = quality(dictionary, held_out)
    assert measured["explained_variance"] > 0.9
    assert measured["l0"] <= ACTIVE
    cosines = true_directions() @ dictionary.W_dec.detach().T  # (TRUE, n)
    assert (cosines.max(dim=1).values > 0.9).float().mean() >= 0.9  # most true directions have a latent
    assert record["steps"] == 400 and record["tokens"] == 400 * 512
    assert record["explained_variance"] > 0.9 and record["k"] == ACTIVE and record["n"] == 128


def test_decoder_rows_have_unit_norm_after_training(trained):
    dictionary, _ = trained
    norms = dictionary.W_dec.detach().norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)


def test_a_step_leaves_the_decoders_gradient_outside_any_graph_and_across_its_rows():
    """The gradient along each decoder row is taken out before Adam reads it, and taking it out builds no
    graph: a gradient with a grad_fn would keep every earlier step's graph alive (memory grew ~5 MB a
    step at 3,072 latents × 384)."""
    data = synthetic(512, seed=0)
    dictionary = initialised(data, 128, ACTIVE, seed=0)
    optimizer = torch.optim.Adam(dictionary.parameters(), lr=0.0)  # no move: the rows stay as they were
    step(dictionary, optimizer, data, torch.zeros(128, dtype=torch.long), dead_after=10**9, aux_scale=0.0)
    grad = dictionary.W_dec.grad  # (n, d)
    assert grad.grad_fn is None and not grad.requires_grad
    assert grad.abs().max() > 0
    along = (grad * dictionary.W_dec.detach()).sum(dim=1)  # (n,)
    assert along.abs().max() < 1e-6


def test_encode_keeps_the_k_largest_pre_activations_relud_and_zeros_the_rest(trained):
    dictionary, _ = trained
    x = synthetic(256, seed=5)
    with torch.no_grad():
        latents, pre = dictionary.encode(x), dictionary.pre_activations(x)  # (256, n) each
    assert ((latents != 0).sum(dim=1) <= ACTIVE).all()
    kept = pre.topk(ACTIVE, dim=1)
    assert torch.equal(latents.gather(1, kept.indices), kept.values.relu())
    outside = latents.scatter(1, kept.indices, 0.0)  # the latents with the top k set to 0
    assert torch.equal(outside, torch.zeros_like(outside))  # nothing outside the top k


def test_a_fresh_dictionary_reads_the_directions_it_writes_and_starts_at_the_first_batchs_mean():
    first = synthetic(512, seed=1) * 7.0  # (512, D), far from unit scale
    dictionary = initialised(first, n=32, k=2, seed=3)
    assert torch.equal(dictionary.W_enc, dictionary.W_dec.T)
    assert torch.allclose(dictionary.W_dec.norm(dim=1), torch.ones(32))
    scaled = first * dictionary.input_scale
    assert scaled.pow(2).sum(dim=1).mean().item() == pytest.approx(D, rel=1e-5)  # mean squared norm d
    assert torch.allclose(dictionary.b_dec, scaled.mean(dim=0), atol=1e-5)
    assert torch.equal(dictionary.b_enc, torch.zeros(32))


def test_decode_answers_in_the_layers_own_units(trained):
    dictionary, _ = trained
    x = synthetic(64, seed=6) * 10.0
    dictionary.input_scale /= 10.0  # the same dictionary, for a layer ten times larger
    try:
        x_hat, latents = dictionary(x)
        assert torch.allclose(x_hat, dictionary.decode(latents), atol=1e-4)
        assert quality(dictionary, x)["explained_variance"] > 0.9
    finally:
        dictionary.input_scale *= 10.0


def revived(aux_scale: float) -> tuple[float, float]:
    """Half the latents made dead (encoder columns shrunk 100 times, so they never win the top k), then
    trained: (dead fraction on held-out rows before, after)."""
    data = batches(150, seed=7)
    dictionary = initialised(data[0], n=TRUE, k=ACTIVE, seed=0)
    with torch.no_grad():
        dictionary.W_enc[:, TRUE // 2 :] *= 0.01
    before = quality(dictionary, synthetic(4096, seed=99))["dead_fraction"]
    kept, _ = train_dictionary(
        data, D, TRUE, ACTIVE, 150, lr=1e-2, aux_scale=aux_scale, dead_after=2048, start=dictionary
    )
    return before, quality(kept, synthetic(4096, seed=99))["dead_fraction"]


def test_auxk_brings_dead_latents_back_and_without_it_they_stay_dead(one_thread):
    before, with_aux = revived(1 / 32)
    _, without = revived(0.0)
    assert before >= 0.5
    assert without >= 0.5  # a latent that never wins the top k gets no gradient from the main loss
    assert with_aux < 0.15  # measured 0.05: the dead latents take up the true directions nobody covered


def test_quality_matches_a_hand_computation():
    """d 2, four latents, k 1; rows [2, 0], [0, 1], [1, 1], [-1, -1], in batches of 3 and 1.

    Pre-activations pick latent 0 (value 2), 1 (value 1), 2 (value √2) for the first three rows,
    which they rebuild exactly; the last row's largest pre-activation is 0, so it gets no latent
    and x̂ = 0, an error of 2. Σ‖x − mean‖² with mean (0.5, 0.25) is 7.75. Latent 3 never fires.
    """
    dictionary = TopKDictionary(2, 4, k=1)
    r = 1 / math.sqrt(2)
    with torch.no_grad():
        dictionary.W_dec.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [r, r], [r, -r]]))
        dictionary.W_enc.copy_(dictionary.W_dec.T)
    rows = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, -1.0]])
    measured = quality(dictionary, rows, batch=3)
    assert measured["explained_variance"] == pytest.approx(1 - 2 / 7.75)
    assert measured["l0"] == pytest.approx(0.75)
    assert measured["dead_fraction"] == pytest.approx(0.25)
    assert measured["dense_fraction"] == pytest.approx(0.75)  # each live latent fires on 1 row in 4
    assert torch.allclose(measured["densities"], torch.tensor([0.25, 0.25, 0.25, 0.0]))


def test_the_same_seed_gives_identical_weights_and_another_seed_does_not(one_thread):
    def weights(seed: int) -> dict:
        dictionary, _ = train_dictionary(batches(20), D, 64, ACTIVE, 20, seed=seed)
        return dictionary.state_dict()

    first, again, other = weights(0), weights(0), weights(1)
    assert all(torch.equal(first[name], again[name]) for name in first if name != "_extra_state")
    assert not torch.equal(first["W_dec"], other["W_dec"])


def test_a_saved_dictionary_reloads_with_its_k_and_scale(trained):
    dictionary, _ = trained
    copy = TopKDictionary(D, 128, k=1)
    copy.load_state_dict(dictionary.state_dict())
    assert copy.k == ACTIVE and copy.input_scale == dictionary.input_scale
    x = synthetic(32, seed=8)
    assert torch.equal(copy(x)[0], dictionary(x)[0])


def test_the_learning_rate_warms_up_holds_and_decays_to_nothing():
    steps = 100  # 5 steps of warm-up, 20 of decay
    assert [schedule(s, steps) for s in (0, 4, 50, 80, 90, 99)] == pytest.approx([0.2, 1, 1, 1, 0.5, 0.05])


def test_training_stops_when_the_batches_run_out_and_refuses_none(one_thread):
    _, record = train_dictionary(batches(3), D, 32, 2, steps=10)
    assert record["steps"] == 3 and record["tokens"] == 3 * 512
    with pytest.raises(ValueError, match="at least one batch"):
        train_dictionary([], D, 32, 2, steps=10)
    with pytest.raises(ValueError, match=r"shape \(B, 32\), got \(4, 8\)"):
        train_dictionary([torch.zeros(4, 8)], D, 32, 2, steps=10)
