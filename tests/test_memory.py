"""The memory check: an exact parameter count from the sizes, and a refusal before allocating."""

import pytest
import torch

from tinygpt import memory
from tinygpt.errors import UserError
from tinygpt.memory import check_fits, free_memory, parameter_count
from tinygpt.model import GPT, GPTConfig


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("sizes", [(1, 1, 8, 4, 3), (2, 2, 16, 8, 11), (3, 4, 32, 16, 65)])
def test_parameter_count_equals_the_built_model(sizes, bias):
    n_layer, n_head, n_embd, block_size, vocab_size = sizes
    config = GPTConfig(vocab_size, block_size, n_layer, n_head, n_embd, bias=bias)
    assert parameter_count(config) == GPT(config).num_params()


def test_free_memory_on_cpu_is_a_plausible_byte_count():
    free = free_memory(torch.device("cpu"))
    assert free is None or 2**20 < free < 2**50


def test_a_model_larger_than_free_memory_is_refused(monkeypatch):
    config = GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=2, n_embd=64)
    needed = parameter_count(config) * 16
    monkeypatch.setattr(memory, "free_memory", lambda device: needed)
    check_fits(config, torch.device("cpu"))  # exactly enough: allowed
    monkeypatch.setattr(memory, "free_memory", lambda device: needed - 1)
    with pytest.raises(UserError, match=f"{parameter_count(config):,} parameters need at least"):
        check_fits(config, torch.device("cpu"))
    monkeypatch.setattr(memory, "free_memory", lambda device: None)  # unknown: no check
    check_fits(config, torch.device("cpu"))
