"""The per-device speed choices, exercised as far as this machine allows (CUDA tests skip without it)."""

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_raw, train

from tinygpt import GPT, GPTConfig
from tinygpt.config.run_config import TrainSection, from_dict
from tinygpt.data.corpus import Batches
from tinygpt.device import pick_device
from tinygpt.training.optimizer import make_optimizer
from tinygpt.training.precision import autocast_for, prepare_device, resolve_dtype

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16))


@pytest.mark.parametrize(("device", "fused"), [("cpu", True), ("cuda", True), ("mps", False)])
def test_adamw_is_fused_on_cpu_and_cuda_and_foreach_elsewhere(device, fused):
    optimizer = make_optimizer(model(), TrainSection(), torch.device(device))  # built, never stepped
    assert bool(optimizer.defaults["fused"]) is fused
    assert bool(optimizer.defaults["foreach"]) is not fused


def test_fused_adamw_takes_the_same_steps_as_the_plain_loop():
    fused, plain = model(), model()
    t = TrainSection(learning_rate=1e-2)
    plain_groups = [
        {"params": [p for p in plain.parameters() if p.dim() >= 2], "weight_decay": t.weight_decay},
        {"params": [p for p in plain.parameters() if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizers = [
        make_optimizer(fused, t, torch.device("cpu")),
        torch.optim.AdamW(plain_groups, lr=t.learning_rate, betas=tuple(t.betas), foreach=False),
    ]
    idx = torch.randint(11, (4, 8))
    for _ in range(3):
        for m, optimizer in zip((fused, plain), optimizers, strict=True):
            _, loss = m(idx, idx)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    for a, b in zip(fused.parameters(), plain.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)  # steps of 1e-2 agree to rounding
    assert not torch.equal(fused.wte.weight, model().wte.weight)  # the steps did move the weights


def test_cuda_gets_tf32_and_cpu_is_left_alone():
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        prepare_device(torch.device("cpu"))
        assert not torch.backends.cuda.matmul.allow_tf32
        prepare_device(torch.device("cuda"))
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


@pytest.mark.filterwarnings("ignore:User provided device_type of 'cuda'")
@pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")  # built, not entered, without CUDA
def test_autocast_choice_per_device_and_dtype():
    bf16 = autocast_for(torch.device("cuda"), "bfloat16")
    assert bf16.device == "cuda" and bf16.fast_dtype == torch.bfloat16
    assert autocast_for(torch.device("cpu"), "bfloat16").fast_dtype == torch.bfloat16
    assert not isinstance(autocast_for(torch.device("cpu"), "float32"), torch.autocast)


@pytest.mark.parametrize(
    ("device", "capability", "cpu_bf16", "expected"),
    [
        ("cuda", (9, 0), False, "bfloat16"),  # H100/H200: bfloat16 tensor cores
        ("cuda", (8, 0), False, "bfloat16"),  # A100
        ("cuda", (7, 0), False, "float16"),  # V100: float16 tensor cores only
        ("cpu", None, True, "bfloat16"),  # AVX-512 BF16 (and AMX)
        ("cpu", None, False, "float32"),  # AVX2 or plain AVX-512: bfloat16 would be slower
        ("mps", None, True, "float32"),
    ],
)
def test_dtype_auto_picks_what_the_device_multiplies_natively(
    monkeypatch, device, capability, cpu_bf16, expected
):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: cpu_bf16)
    assert resolve_dtype("auto", torch.device(device)) == expected
    for explicit in ("float32", "bfloat16"):
        assert resolve_dtype(explicit, torch.device(device)) == explicit  # a named precision stands


def test_training_reports_what_auto_chose_and_warns_of_slow_bfloat16(
    corpus_file, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)  # an AVX2 laptop, say
    quick = {"max_iters": 2, "eval_interval": 2}
    record = train(from_dict(tiny_raw(corpus_file, tmp_path / "auto", dtype="auto", **quick)), progress=False)
    out = capsys.readouterr().out
    assert record["dtype"] == "float32" and "(float32 by train.dtype auto)" in out
    assert "no bfloat16 instructions" not in out
    record = train(
        from_dict(tiny_raw(corpus_file, tmp_path / "bf16", dtype="bfloat16", **quick)), progress=False
    )
    assert record["dtype"] == "bfloat16"
    assert "no bfloat16 instructions (AVX-512 BF16)" in capsys.readouterr().out


def test_auto_prefers_cuda_when_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device("auto").type == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert pick_device("auto").type == "cpu"


def test_cpu_batches_are_not_pinned():
    x, y = Batches(torch.arange(100, dtype=torch.int32), 8, 4, torch.device("cpu")).sample(torch.Generator())
    assert not x.is_pinned() and x.dtype == torch.long


@needs_cuda
def test_cuda_batches_arrive_on_the_device_shifted_by_one():
    x, y = Batches(torch.arange(100, dtype=torch.int32), 8, 4, torch.device("cuda")).sample(torch.Generator())
    assert x.is_cuda and torch.equal(x[:, 1:], y[:, :-1])


@needs_cuda
def test_training_on_cuda_in_bfloat16_learns(corpus_file, tmp_path):
    raw = tiny_raw(corpus_file, tmp_path / "cuda", device="cuda", dtype="bfloat16", max_iters=40)
    record = train(from_dict(raw), progress=False)
    assert record["device"].startswith("cuda") and record["val_loss"] < 3.0


def test_attention_under_cpu_bfloat16_autocast_runs_in_float32(monkeypatch):
    """bfloat16 attention kernels are slow on CPU: under autocast the model attends in float32."""
    attn = model().h[0].attn
    x = torch.randn(2, 8, 16, requires_grad=True)
    q, k, v = attn.c_attn(x)  # float32: the reference
    exact = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    kernel, seen = F.scaled_dot_product_attention, []
    monkeypatch.setattr(
        F, "scaled_dot_product_attention", lambda q, *a, **kw: seen.append(q.dtype) or kernel(q, *a, **kw)
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = attn._fused(q.bfloat16(), k.bfloat16(), v.bfloat16(), 0.0)
        out = attn(x)
    assert seen == [torch.float32, torch.float32]
    assert y.dtype == torch.bfloat16  # handed on as autocast's own kernel would
    assert torch.allclose(y.float(), exact, atol=2e-2)
    out.float().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
