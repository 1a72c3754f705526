"""Generation: sampling filters, the KV cache, the refill rule past block_size, streaming."""

import pytest
import torch
import torch.nn.functional as F

from tinygpt import GPT, GPTConfig
from tinygpt.generation import fused_step as decode
from tinygpt.generation.kv_cache import KVCache
from tinygpt.generation.sampling import generate, sample_next, stream
from tinygpt.model import gelu
from tinygpt.threads import Threads


def small_model(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    config = dict(vocab_size=11, block_size=16, n_layer=3, n_head=4, n_embd=32, dropout=0.0)
    return GPT(GPTConfig(**(config | overrides))).eval()


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


def test_cached_forward_equals_full_forward():
    model = small_model()
    idx = torch.randint(11, (2, 12))
    full, _ = model(idx)
    cache = KVCache(model.config, 2)
    prefix, _ = model(idx[:, :5], cache=cache)  # a prompt
    chunk, _ = model(idx[:, 5:8], cache=cache)  # several new positions at once
    steps = [model(idx[:, t : t + 1], cache=cache)[0] for t in range(8, 12)]  # one at a time
    assert torch.allclose(torch.cat([prefix, chunk, *steps], dim=1), full, atol=1e-5)


def test_one_position_step_computes_the_models_forward():
    """A Decoder's step (generation's one-position step) gives the logits and cache the forward gives,
    with and without biases (the GELU's constants folded into both), and for an attention-only model."""
    for options in ({"bias": True}, {"bias": False}, {"mlp": False}):
        model = small_model(seed=4, **options)
        idx = torch.randint(11, (2, 9))
        full, _ = model(idx)  # (2, 9, vocab)
        cache = KVCache(model.config, 2)
        model(idx[:, :6], cache=cache)
        decoder = decode.Decoder(model)
        matrices = [m for layer in decoder.layers for m in layer if isinstance(m, decode.Matrix)]
        assert all(m.weight.is_contiguous() for m in matrices)  # (in, out), as a row reads fastest
        steps = [decoder.step(idx[:, t], cache) for t in range(6, 9)]  # 3 × (2, vocab)
        assert cache.length == 9
        assert torch.allclose(torch.stack(steps, dim=1), full[:, 6:], atol=1e-5)


@pytest.mark.parametrize("threads", [2, 4])
def test_a_step_with_its_products_cut_over_the_threads_computes_the_models_forward(threads):
    """Above SPLIT_FROM each product is cut into one run of rows a thread (split_from=0 cuts this small
    model's): the same logits, for rows with and without biases, at a batch of 2."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for bias in (True, False):
            model = small_model(seed=7, bias=bias)
            idx = torch.randint(11, (2, 9))
            full, _ = model(idx)  # (2, 9, vocab)
            cache = KVCache(model.config, 2)
            model(idx[:, :6], cache=cache)
            decoder = decode.Decoder(model, split_from=0)
            assert decoder.parts(model.config.n_embd) == threads  # the cut is what runs
            steps = [decoder.step(idx[:, t], cache) for t in range(6, 9)]  # 3 × (2, vocab)
            assert torch.allclose(torch.stack(steps, dim=1), full[:, 6:], atol=1e-5)
    finally:
        torch.set_num_threads(before)


def test_products_are_cut_only_for_a_big_model_on_several_threads_that_divide_its_width():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert not decode.Decoder(small_model()).split  # 38 KB of block matrices: whole products
        big = small_model(n_layer=6, n_head=6, n_embd=384)  # 42 MB, nanoGPT shakespeare_char's shape
        assert decode.Decoder(big).split and decode.Decoder(big).parts(384) == 2
        torch.set_num_threads(5)
        assert decode.Decoder(big).parts(384) == 1  # 384 rows do not cut into 5 runs
        torch.set_num_threads(1)
        assert decode.Decoder(big).parts(384) == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_one_position_step_on_cuda_computes_the_models_forward(monkeypatch):
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)  # training tests may turn it on
    model = small_model(seed=6).cuda()
    idx = torch.randint(11, (2, 9), device="cuda")
    full, _ = model(idx)  # (2, 9, vocab)
    cache = KVCache(model.config, 2)
    model(idx[:, :6], cache=cache)
    decoder = decode.Decoder(model)
    steps = [decoder.step(idx[:, t], cache) for t in range(6, 9)]  # 3 × (2, vocab)
    assert torch.allclose(torch.stack(steps, dim=1), full[:, 6:], atol=1e-4)


def test_each_generation_reads_the_weights_as_they_are_when_it_starts():
    """The Decoder's (in, out) copies are made per generation: weights changed between two calls count."""
    model = small_model(seed=5)
    prompt = torch.zeros(1, 2, dtype=torch.long)
    before = generate(model, prompt, 6, temperature=0)
    with torch.no_grad():
        for block in model.h:
            block.mlp.c_fc.weight.mul_(-3.0)
    after = generate(model, prompt, 6, temperature=0)
    assert torch.equal(after, generate(model, prompt, 6, temperature=0, use_cache=False))
    assert not torch.equal(before, after)


def test_the_one_position_step_is_left_out_where_a_hook_point_is_watched():
    model = small_model()
    cpu = torch.device("cpu")
    assert decode.usable(model, cpu)
    with model.hooks({"blocks.1.attn.z": lambda z, name: None}):  # as ablation hooks
        assert not decode.usable(model, cpu)
    with model.hooks({"blocks.0.attn.pattern": lambda weights, name: None}):  # the explicit path
        assert not decode.usable(model, cpu)
    assert decode.usable(model, cpu)
    assert not decode.usable(model.train(), cpu)
    assert not decode.usable(model.eval().to(torch.bfloat16), cpu)


def test_greedy_output_with_and_without_cache_is_identical_up_to_block_size():
    model = small_model(seed=3)
    idx = torch.randint(11, (2, 4))
    with_cache = generate(model, idx, 12, temperature=0)  # 4 + 12 = block_size
    without = generate(model, idx, 12, temperature=0, use_cache=False)
    assert torch.equal(with_cache, without)


def test_exact_mode_slides_the_window_past_block_size():
    model = small_model(seed=1)
    idx = torch.randint(11, (1, 5))
    out = generate(model, idx, 40, temperature=0, use_cache=False)
    assert out.shape == (1, 45)
    seq = idx
    for _ in range(40):  # the definition: argmax over the last block_size characters
        logits, _ = model(seq[:, -16:])
        seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)


def test_cached_generation_runs_past_block_size_by_refilling_from_recent_tokens():
    model = small_model(seed=2)
    out = generate(
        model,
        torch.zeros(2, 3, dtype=torch.long),
        50,
        temperature=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    assert out.shape == (2, 53)
    assert int(out.max()) < 11


def test_the_refilled_cache_predicts_what_the_model_does_from_the_recent_half_block():
    """The refill rule, checked against a reference built from the model's plain forward pass.

    Greedy, the cache holds a growing context; once a prediction has used a full block, it
    starts again from the most recent block_size // 2 characters. So each new character is
    the argmax of the model run on the characters since the last refill point.
    """
    model = small_model(seed=3)
    with torch.no_grad():  # large random weights, positions weighing most: output that depends on them
        for p in model.parameters():
            p.normal_(0.0, 0.5)
        model.wpe.weight.normal_(0.0, 3.0)
    block, half = 16, 8
    prompt = torch.randint(11, (1, 5))
    out = generate(model, prompt, 60, temperature=0)
    seq, start = prompt, 0  # start: where the context the cache holds begins
    for _ in range(60):
        if seq.size(1) - start > block:  # the cache held a full block: refill from the last half
            start = seq.size(1) - half
        logits, _ = model(seq[:, start:])
        seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)
    assert not torch.equal(out, generate(model, prompt, 60, temperature=0, use_cache=False))  # not a window


def test_generation_flips_no_process_wide_switch(monkeypatch):
    """A library caller with threads sees torch's settings as it left them, during every step too."""
    model = small_model()
    seen = []
    one_step = decode.Decoder.step

    def spy(decoder, ids, cache):
        seen.append((cache.length, torch.backends.mkldnn.enabled))
        return one_step(decoder, ids, cache)

    monkeypatch.setattr(decode.Decoder, "step", spy)
    for _ in stream(model, torch.zeros(1, 2, dtype=torch.long), 4):
        assert torch.backends.mkldnn.enabled
    assert seen == [(2, True), (3, True), (4, True)]  # one-token steps after the 2-character prompt


def test_a_generation_steps_gelu_is_the_exact_gelu_through_torchs_own_kernels():
    """One position a row takes x·Φ(x) instead of F.gelu (oneDNN's, costly per call): the same function."""
    x = torch.linspace(-10, 10, 2001).reshape(1, 1, -1)  # (B, 1, width): a cached step's shape
    assert torch.allclose(gelu(x), F.gelu(x), rtol=0, atol=2e-6)  # GPT-2's tanh form differs by up to 5e-4
    assert torch.equal(gelu(x.reshape(1, -1, 1)), F.gelu(x.reshape(1, -1, 1)))  # many positions: F.gelu


def test_sampling_is_reproducible_with_a_generator():
    model = small_model()
    idx = torch.zeros(1, 1, dtype=torch.long)
    a = generate(model, idx, 20, generator=torch.Generator().manual_seed(7))
    b = generate(model, idx, 20, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


def test_a_temperature_too_small_for_float32_is_greedy_with_any_filter():
    logits = torch.tensor([[0.1, 3.0, 2.9, -1.0], [5.0, 0.0, 4.99, 0.0]])
    for temperature in (1e-40, 1e-300, 5e-324):
        for filters in ({}, {"top_k": 2}, {"top_p": 0.9}, {"top_k": 3, "top_p": 1e-320}):
            drawn = draw(logits, n=50, temperature=temperature, **filters).view(50, 2)
            assert drawn.tolist() == [[1, 0]] * 50, (temperature, filters)


def test_a_tiny_top_p_keeps_only_the_most_likely_and_ties_at_a_tiny_temperature_are_drawn_evenly():
    logits = torch.log(torch.tensor([[0.1, 0.5, 0.15, 0.25]]))
    assert set(draw(logits, top_p=1e-320).tolist()) == {1}
    tied = torch.tensor([[2.0, 2.0, 1.0]])
    counts = torch.bincount(draw(tied, n=2000, temperature=1e-300), minlength=3) / 2000
    assert counts[2] == 0 and abs(counts[0] - 0.5) < 0.05


def test_a_huge_temperature_draws_about_evenly_and_top_k_still_cuts():
    logits = torch.tensor([[0.0, 10.0, -10.0, 5.0]])
    counts = torch.bincount(draw(logits, n=4000, temperature=1e308), minlength=4) / 4000
    assert torch.allclose(counts, torch.full((4,), 0.25), atol=0.03)
    assert set(draw(logits, temperature=1e308, top_k=2).tolist()) == {1, 3}


def test_the_one_position_steps_run_through_threads_which_measure_them_and_change_nothing():
    """stream(threads=...) times each cached step at the count it measures (tinygpt.threads) and samples
    what it samples without: the steps, not the refills, are what the count is chosen on."""
    model = small_model()
    ticks, counts = iter(range(10_000)), []
    clock = lambda: next(ticks)  # noqa: E731
    threads = Threads([1, 2], rounds=2, window=100, idle=lambda: None, clock=clock, set_threads=counts.append)
    prompt = torch.zeros(1, 3, dtype=torch.long)
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    made = torch.cat(list(stream(model, prompt, 40, generator=g(), threads=threads)), dim=1)
    assert torch.equal(made, generate(model, prompt, 40, generator=g())[:, 3:])
    assert threads.probes == 1 and set(counts) >= {1, 2}  # measured 1 2 1 2 after a warm-up step at 1
    # 40 new characters from a 3-character prompt, block 16: 4 full passes (the first and 3 refills, at
    # 16 - 3 and then every 8 steps), not timed; of the 36 steps, 5 were the warm-up and the probe
    assert len(threads.recent) == 40 - 4 - 5
