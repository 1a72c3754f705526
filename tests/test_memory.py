"""The memory check: an exact parameter count from the sizes, and a refusal before allocating."""

import pytest
import torch

from tinygpt.errors import UserError
from tinygpt.model import GPT, GPTConfig
from tinygpt.training import memory
from tinygpt.training.memory import activation_bytes, check_fits, free_memory, parameter_count


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("sizes", [(1, 1, 8, 4, 3), (2, 2, 16, 8, 11), (3, 4, 32, 16, 65)])
def test_parameter_count_equals_the_built_model(sizes, bias):
    n_layer, n_head, n_embd, block_size, vocab_size = sizes
    config = GPTConfig(vocab_size, block_size, n_layer, n_head, n_embd, bias=bias)
    assert parameter_count(config) == GPT(config).num_params()


def test_free_memory_on_cpu_is_a_plausible_byte_count():
    free = free_memory(torch.device("cpu"))
    assert free is None or 2**20 < free < 2**50


def test_a_model_or_batch_larger_than_free_memory_is_refused(monkeypatch):
    config = GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=2, n_embd=64)
    cpu = torch.device("cpu")
    state, activations = parameter_count(config) * 16, activation_bytes(config, batch_size=8)
    monkeypatch.setattr(memory, "free_memory", lambda device: state + activations)
    check_fits(config, 8, cpu)  # exactly enough: allowed
    with pytest.raises(UserError, match=r"the batch is too large to train here: 9 × 64 tokens need at least"):
        check_fits(config, 9, cpu)
    monkeypatch.setattr(memory, "free_memory", lambda device: state - 1)
    with pytest.raises(UserError, match=f"{parameter_count(config):,} parameters need at least"):
        check_fits(config, 1, cpu)
    monkeypatch.setattr(memory, "free_memory", lambda device: None)  # unknown: no check
    check_fits(config, 10**9, cpu)


def test_the_activation_bound_is_below_what_a_training_step_keeps():
    """The bound counts a subset of the tensors autograd saves: it must not exceed what they take."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=65, block_size=32, n_layer=2, n_head=2, n_embd=64, dropout=0.0)
    model, idx = GPT(config), torch.randint(65, (4, 32))
    saved = {}  # by storage, so that views of one tensor count once

    def keep(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        model(idx, targets=idx)
    weights = sum(p.untyped_storage().nbytes() for p in model.parameters())
    assert activation_bytes(config, batch_size=4) <= sum(saved.values()) - weights
