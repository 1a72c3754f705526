"""The memory check: an exact parameter count from the sizes, and a refusal before allocating."""

import ctypes
import ctypes.util
import gc
import sys
from pathlib import Path

import pytest
import torch

from tinygpt.app.bench import PeakMemory
from tinygpt.errors import UserError
from tinygpt.model import GPT, GPTConfig
from tinygpt.training import memory
from tinygpt.training.memory import activation_bytes, check_fits, free_memory, parameter_count


@pytest.mark.parametrize("bias, mlp", [(True, True), (False, True), (True, False), (False, False)])
@pytest.mark.parametrize("sizes", [(1, 1, 8, 4, 3), (2, 2, 16, 8, 11), (3, 4, 32, 16, 65)])
def test_parameter_count_equals_the_built_model(sizes, bias, mlp):
    n_layer, n_head, n_embd, block_size, vocab_size = sizes
    config = GPTConfig(vocab_size, block_size, n_layer, n_head, n_embd, bias=bias, mlp=mlp)
    assert parameter_count(config) == GPT(config).num_params()


def test_free_memory_on_cpu_is_a_plausible_byte_count():
    free = free_memory(torch.device("cpu"))
    assert free is None or 2**20 < free < 2**50


def test_a_model_or_batch_larger_than_free_memory_is_refused(monkeypatch):
    config = GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=2, n_embd=64)
    cpu = torch.device("cpu")
    state, activations = parameter_count(config) * 16, activation_bytes(config, batch_size=8, value_bytes=4)
    monkeypatch.setattr(memory, "free_memory", lambda device: state + activations)
    check_fits(config, 8, cpu, "float32")  # exactly enough: allowed
    with pytest.raises(UserError, match=r"the batch is too large to train here: 9 × 64 tokens need at least"):
        check_fits(config, 9, cpu, "float32")
    monkeypatch.setattr(memory, "free_memory", lambda device: state - 1)
    with pytest.raises(UserError, match=f"{parameter_count(config):,} parameters need at least"):
        check_fits(config, 1, cpu, "float32")
    monkeypatch.setattr(memory, "free_memory", lambda device: None)  # unknown: no check
    check_fits(config, 10**9, cpu, "float32")


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="resets the peak RSS in Linux's /proc")
@pytest.mark.parametrize("mlp", [True, False])
def test_the_activation_bound_is_below_a_real_steps_peak_and_within_half_of_it(mlp):
    """A float32 training step's peak memory (RSS above what was held before it) against the bound:
    the bound must not exceed it (it refuses only what cannot fit), and must be over half of it, so
    that a batch twice too large for the memory is refused; with MLPs and attention-only."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=2, n_embd=64, dropout=0.0, mlp=mlp)
    model, batch = GPT(config), 256  # about 150 MB of activations: well above the allocator's noise
    idx = torch.randint(65, (batch, 64))
    model(idx[:2], targets=idx[:2])[1].backward()  # gradients allocated and first-call set-up done
    release_freed_memory()  # what earlier tests freed, given back: the step's growth then shows in RSS
    memory = PeakMemory(torch.device("cpu"))
    memory.reset()
    before = memory.peak_bytes()
    model(idx, targets=idx)[1].backward()
    peak = memory.peak_bytes() - before
    bound = activation_bytes(config, batch, value_bytes=4)
    assert 0.5 * peak < bound <= peak, (bound, peak)


def release_freed_memory() -> None:
    """Hand memory that Python and the C allocator hold but no longer use back to the system: a step
    that reuses it would not raise the RSS, and its peak would read low after tests that freed a lot."""
    gc.collect()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)


def test_a_million_windows_of_a_tiny_model_are_refused_on_a_16_gib_machine(monkeypatch):
    """The case that once passed the check: batch_size 1000000 needs some 20 GiB even for 1 layer × 16."""
    config = GPTConfig(vocab_size=30, block_size=16, n_layer=1, n_head=2, n_embd=16)
    monkeypatch.setattr(memory, "free_memory", lambda device: 16 * memory.GiB)
    with pytest.raises(UserError, match=r"the batch is too large to train here: 1,000,000 × 16 tokens"):
        check_fits(config, 1_000_000, torch.device("cpu"), "float32")
