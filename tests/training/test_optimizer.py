"""train.optimizer: AdamW, or torch.optim.Muon for the blocks' matrices with AdamW for the rest."""

import pytest
import torch
from conftest import tiny_raw, train
from test_distributed import ROOT, torchrun

from tinygpt.config.run_config import from_dict
from tinygpt.errors import UserError
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.model import GPT, GPTConfig
from tinygpt.training import precision
from tinygpt.training.muon import Float32Muon, orthogonalise
from tinygpt.training.optimizer import MuonWithAdamW, make_optimizer


def muon_raw(corpus, out_dir, **train) -> dict:
    return tiny_raw(corpus, out_dir, optimizer="muon", **train)


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest(corpus_file, tmp_path):
    model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=2, n_head=2, n_embd=16))
    config = from_dict(muon_raw(corpus_file, tmp_path))
    optimizer = make_optimizer(model, config.train, torch.device("cpu"))
    assert isinstance(optimizer, MuonWithAdamW)
    names = {id(p): n for n, p in model.named_parameters()}
    muon = [names[id(p)] for g in optimizer.parts["muon"].param_groups for p in g["params"]]
    adamw = [names[id(p)] for g in optimizer.parts["adamw"].param_groups for p in g["params"]]
    per_block = ["attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"]
    assert sorted(muon) == sorted(f"h.{i}.{name}" for i in range(2) for name in per_block)
    assert sorted(adamw) == sorted(n for n, _ in model.named_parameters() if n not in muon)
    assert "wte.weight" in adamw and "wpe.weight" in adamw  # the embeddings, and so the tied head
    decay, no_decay = optimizer.parts["adamw"].param_groups
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert no_decay["weight_decay"] == 0.0
    assert optimizer.param_groups == optimizer.parts["muon"].param_groups + [decay, no_decay]


def test_a_muon_step_moves_each_matrix_by_an_orthogonalised_update(corpus_file, tmp_path):
    """From rest, with no weight decay: the change of a matrix has its singular values near one size."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=16))
    config = from_dict(muon_raw(corpus_file, tmp_path, weight_decay=0.0))
    optimizer = make_optimizer(model, config.train, torch.device("cpu"))
    matrix = model.h[0].mlp.c_fc.weight  # (64, 16)
    before = matrix.detach().clone()
    _, loss = model(torch.randint(0, 10, (32, 8)), torch.randint(0, 10, (32, 8)))
    loss.backward()
    gradient = matrix.grad.clone()
    optimizer.step()
    change = before - matrix.detach()
    # rank 15 of 16: ln_2's output has zero mean over the features, so the gradient lacks that direction
    rank = int(torch.linalg.matrix_rank(gradient))
    assert rank == 15
    singular = torch.linalg.svdvals(change)
    assert (
        singular[:rank].max() / singular[:rank].min() < 3
    )  # Newton–Schulz leaves them within about 0.7-1.2×
    assert singular[rank] < 1e-3 * singular[0]  # float32 keeps the missing direction missing
    spread = torch.linalg.svdvals(gradient)[:rank]
    assert spread.max() / spread.min() > 10  # the gradient's own spread
    assert torch.sum(change * gradient) > 0  # a descent direction


def spread_matrix(rows: int, cols: int, condition: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """U S Vᵀ (rows, cols) with singular values from 1 down to 1/condition: returns it, U and V."""
    torch.manual_seed(0)
    k = min(rows, cols)
    u, _ = torch.linalg.qr(torch.randn(rows, k))  # (rows, k), orthonormal columns
    v, _ = torch.linalg.qr(torch.randn(cols, k))  # (cols, k)
    s = torch.logspace(0, -torch.log10(torch.tensor(condition)).item(), k)
    return u @ torch.diag(s) @ v.T, u, v


@pytest.mark.parametrize("shape", [(64, 16), (16, 64), (48, 48), (384, 128)])
def test_float32_orthogonalisation_approaches_the_polar_factor_of_the_svd(shape):
    """An independent reference: for G = U S Vᵀ the polar factor is U Vᵀ (torch.linalg's QR and SVD)."""
    matrix, u, v = spread_matrix(*shape, condition=100)  # singular values 1 … 0.01
    result = orthogonalise(matrix)  # float32, five iterations
    assert result.dtype == torch.float32 and result.shape == matrix.shape
    singular = torch.linalg.svdvals(result)
    assert singular.min() > 0.65 and singular.max() < 1.25  # measured: 0.68 … 1.21 (the quintic's spread)
    inner = u.T @ result @ v  # diagonal exactly when the result has G's singular vectors
    assert (inner - torch.diag(torch.diagonal(inner))).abs().max() < 1e-4
    polar = u @ v.T
    assert torch.sum(result * polar) / (result.norm() * polar.norm()) > 0.97  # measured 0.983 … 0.989


def test_float32_muon_steps_as_torchs_bfloat16_muon_within_bfloat16s_precision():
    """Three steps (momentum, Nesterov, weight decay, the RMS-matched learning rate) from the same start."""
    hyper = dict(lr=0.02, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    start, _, _ = spread_matrix(128, 384, condition=100)
    ours, theirs = start.clone().requires_grad_(), start.clone().requires_grad_()
    optimizers = [Float32Muon([ours], **hyper), torch.optim.Muon([theirs], **hyper)]
    for step in range(3):
        gradient, _, _ = spread_matrix(128, 384, condition=10.0 ** (step + 1))
        for p, optimizer in zip((ours, theirs), optimizers, strict=True):
            p.grad = gradient.clone()
            optimizer.step()
    moved_ours, moved_theirs = (ours - start).detach(), (theirs - start).detach()
    assert torch.sum(moved_ours * moved_theirs) / (moved_ours.norm() * moved_theirs.norm()) > 0.999
    assert (moved_ours - moved_theirs).norm() / moved_theirs.norm() < 0.05  # bfloat16: 8 bits, 15 matmuls


def test_float32_muon_and_torchs_muon_load_each_others_state():
    """A checkpoint from a CPU with bfloat16 units resumes on one without, and back."""
    hyper = dict(lr=0.02, adjust_lr_fn="match_rms_adamw")
    p, q = torch.nn.Parameter(torch.randn(8, 4)), torch.nn.Parameter(torch.randn(8, 4))
    theirs, ours = torch.optim.Muon([p], **hyper), Float32Muon([q], **hyper)
    p.grad = torch.randn(8, 4)
    theirs.step()
    ours.load_state_dict(theirs.state_dict())
    assert torch.equal(ours.state[q]["momentum_buffer"], theirs.state[p]["momentum_buffer"])
    theirs.load_state_dict(ours.state_dict())
    assert ours.state_dict()["param_groups"] == theirs.state_dict()["param_groups"]


def test_training_with_muon_learns_and_resumes_exactly(corpus_file, tmp_path):
    straight = train(from_dict(muon_raw(corpus_file, tmp_path / "straight", max_iters=40)), progress=False)
    assert straight["val_loss"] < 3.0  # from about 3.7 at step 0

    first = muon_raw(corpus_file, tmp_path / "split", max_iters=20)
    first["train"]["min_lr"] = first["train"]["learning_rate"]  # a schedule max_iters cannot change
    train(from_dict(first), progress=False)
    saved = read_checkpoint(tmp_path / "split" / "last.pt").optimizer
    assert set(saved) == {"muon", "adamw"} and saved["muon"]["state"]  # Muon's momentum is saved

    again = muon_raw(corpus_file, tmp_path / "again", max_iters=40)
    again["train"]["min_lr"] = again["train"]["learning_rate"]
    train(from_dict(again), progress=False)
    first["train"]["max_iters"] = 40
    train(from_dict(first), resume=True, progress=False)
    resumed = read_checkpoint(tmp_path / "split" / "last.pt")
    expected = read_checkpoint(tmp_path / "again" / "last.pt")
    assert all(torch.equal(resumed.weights[k], expected.weights[k]) for k in expected.weights)


def test_resuming_with_another_optimizer_is_refused_before_any_note(corpus_file, tmp_path, capsys):
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=20)
    train(from_dict(raw), progress=False)
    raw["train"].update(optimizer="muon", max_iters=40)
    capsys.readouterr()
    with pytest.raises(UserError, match="trained with train.optimizer adamw, the config says muon"):
        train(from_dict(raw), resume=True, progress=False)
    assert "note:" not in capsys.readouterr().out  # the error is the one thing said


@pytest.mark.parametrize(("dtype", "bfloat16_units", "expected"), [
    ("float32", True, Float32Muon),  # float32 asked for: float32 orthogonalisation
    ("auto", False, Float32Muon),  # auto computes in float32 on a CPU without bfloat16 units
    ("auto", True, torch.optim.Muon),  # and in bfloat16 where they are: torch's own Muon
    ("bfloat16", False, torch.optim.Muon),
])  # fmt: skip
def test_muon_orthogonalises_in_the_precision_the_cpu_run_computes_in(
    corpus_file, tmp_path, monkeypatch, dtype, bfloat16_units, expected
):
    monkeypatch.setattr(precision, "cpu_multiplies_bfloat16", lambda: bfloat16_units)
    config = from_dict(muon_raw(corpus_file, tmp_path, dtype=dtype))
    optimizer = make_optimizer(GPT(GPTConfig(10, 8, 1, 2, 16)), config.train, torch.device("cpu"))
    assert type(optimizer.parts["muon"]) is expected


def test_a_torch_without_muon_trains_with_tinygpts_float32_muon(corpus_file, tmp_path, monkeypatch):
    monkeypatch.delattr(torch.optim, "Muon")  # torch < 2.9
    monkeypatch.setattr(precision, "cpu_multiplies_bfloat16", lambda: True)  # where torch's would serve
    config = from_dict(muon_raw(corpus_file, tmp_path / "run", dtype="bfloat16", max_iters=2))
    optimizer = make_optimizer(GPT(GPTConfig(10, 8, 1, 2, 16)), config.train, torch.device("cpu"))
    assert type(optimizer.parts["muon"]) is Float32Muon
    train(config, progress=False)
    assert (tmp_path / "run" / "last.pt").exists()


def test_an_unknown_optimizer_is_a_config_error(corpus_file, tmp_path):
    with pytest.raises(UserError, match="train.optimizer"):
        from_dict(tiny_raw(corpus_file, tmp_path, optimizer="sgd"))


@pytest.mark.slow
def test_muon_under_torchrun_trains_and_resumes_like_one_run(corpus_file, tmp_path):
    constant = dict(batch_size=4, warmup_iters=0, min_lr=3e-3, learning_rate=3e-3, eval_interval=10)
    train_py = ROOT / "scripts" / "train.py"
    straight_raw = muon_raw(corpus_file, tmp_path / "straight", max_iters=20, **constant)
    straight = torchrun(train_py, straight_raw, tmp_path)
    assert straight.returncode == 0, straight.stderr
    first = torchrun(train_py, muon_raw(corpus_file, tmp_path / "split", max_iters=10, **constant), tmp_path)
    assert first.returncode == 0, first.stderr
    raw = muon_raw(corpus_file, tmp_path / "split", max_iters=20, **constant)
    resumed = torchrun(train_py, raw, tmp_path, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a = read_checkpoint(tmp_path / "split" / "last.pt")
    b = read_checkpoint(tmp_path / "straight" / "last.pt")
    assert a.record["step"] == b.record["step"] == 20
    assert all(torch.equal(a.weights[k], b.weights[k]) for k in b.weights)
    assert set(a.optimizer) == {"muon", "adamw"}
