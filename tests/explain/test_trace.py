import pytest
import torch
import torch.nn.functional as F

from tinygpt import GPT, GPTConfig, UserError
from tinygpt.explain.trace import chosen, trace_prompt
from tinygpt.tokenizer import CharTokenizer, prompt_ids


def spread_model(seed: int = 0, **shape) -> GPT:
    """A small model with weights large enough that attention is far from uniform."""
    torch.manual_seed(seed)
    config = GPTConfig(
        **{"vocab_size": 11, "block_size": 12, "n_layer": 2, "n_head": 2, "n_embd": 8, **shape}
    )
    model = GPT(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model


def test_trace_follows_the_fast_forward_pass():
    model = spread_model()
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    trace = trace_prompt(model, ids)
    logits, _ = model(torch.tensor([ids]))  # the fast path, untouched by the trace
    assert torch.allclose(trace.logits, logits[0], atol=1e-5)
    assert torch.equal(trace.tok_emb, model.wte.weight[ids])
    assert torch.equal(trace.pos_emb, model.wpe.weight[: len(ids)])
    first = trace.layers[0]
    assert torch.allclose(first.resid, trace.tok_emb + trace.pos_emb)
    for layer, block in zip(trace.layers, model.h, strict=True):
        assert torch.allclose(layer.ln_1, block.ln_1(layer.resid))
        assert torch.allclose(layer.contrib.sum(0) + block.attn.c_proj.bias, layer.out, atol=1e-6)
        assert torch.allclose(layer.weights.sum(-1), torch.ones(2, len(ids)))
        assert (layer.weights.triu(diagonal=1) == 0).all()
    second = trace.layers[1]
    block = model.h[0]
    after_attn = first.resid + first.out
    assert torch.allclose(second.resid, after_attn + block.mlp(block.ln_2(after_attn)), atol=1e-6)
    assert not model.hook_points.active, "every hook the trace attached is gone"


def test_trace_works_without_biases():
    model = spread_model(bias=False)
    trace = trace_prompt(model, [1, 2, 3])
    assert torch.allclose(trace.layers[0].contrib.sum(0), trace.layers[0].out, atol=1e-6)


def test_prompt_and_index_checks(capsys):
    tokenizer = CharTokenizer("\nab")
    assert prompt_ids(tokenizer, "", 4) == [0]  # empty prompt: a newline, as in sampling
    assert prompt_ids(tokenizer, "abab", 4) == [1, 2, 1, 2]
    assert capsys.readouterr().err == ""  # a prompt that fits says nothing
    with pytest.raises(UserError, match="'z'"):
        prompt_ids(tokenizer, "az", 4)
    assert chosen(None, 3, "head") == [0, 1, 2]
    assert chosen(2, 3, "head") == [2]
    with pytest.raises(UserError, match=r"head 3 does not exist: this model has 3 heads \(0 … 2\)"):
        chosen(3, 3, "head")


def test_a_prompt_longer_than_the_context_is_cropped_to_its_end_and_says_so(capsys):
    tokenizer = CharTokenizer("\nab")
    assert prompt_ids(tokenizer, "aabab\nb", 4) == [1, 2, 0, 2]  # "ab\nb": the last 4
    assert capsys.readouterr().err == (
        "note: the prompt has 7 characters, more than this model's block_size of 4; "
        "using its last 4 (positions count from there)\n"
    )


def test_a_backslash_n_typed_in_a_prompt_gets_a_hint_on_how_to_pass_a_newline():
    tokenizer = CharTokenizer("\n:ABCDEIJLMNORTUn")
    with pytest.raises(UserError) as caught:
        prompt_ids(tokenizer, r"ROMEO:\nJULIET:", 64)  # what --prompt "ROMEO:\nJULIET:" gives
    assert str(caught.value) == (
        r"1 character(s) not in the model's vocabulary: '\\'; use only characters that occur in the "
        r"training corpus; a \n typed in a prompt is a backslash and an n, not a newline: in bash write "
        r"--prompt $'ROMEO:\nJULIET:', or put the text in a file and pass --prompt-file FILE"
    )
    with pytest.raises(UserError) as caught:  # a backslash, but no \n: no hint
        prompt_ids(tokenizer, "ROMEO:\\", 64)
    assert "--prompt-file" not in str(caught.value)
    assert prompt_ids(CharTokenizer("\\n"), r"\n", 4) == [0, 1]  # a backslash the model knows is fine


def test_head_contributions_split_c_proj_by_head():
    model = spread_model()
    trace = trace_prompt(model, [1, 2, 3, 4])
    layer, proj = trace.layers[0], model.h[0].attn.c_proj
    merged = layer.heads.transpose(0, 1).reshape(4, 8)  # (T, C): heads side by side
    assert torch.allclose(layer.contrib.sum(0), F.linear(merged, proj.weight), atol=1e-6)
