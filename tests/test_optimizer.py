"""train.optimizer: AdamW, or torch.optim.Muon for the blocks' matrices with AdamW for the rest."""

import pytest
import torch
from conftest import tiny_raw, train
from test_distributed import ROOT, torchrun

from tinygpt.checkpoint import read_checkpoint
from tinygpt.config import from_dict
from tinygpt.errors import UserError
from tinygpt.model import GPT, GPTConfig
from tinygpt.training import progress  # where the summary and its notes are printed
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
    _, loss = model(torch.randint(0, 10, (32, 8)), torch.randint(0, 10, (32, 8)))  # a full-rank gradient
    loss.backward()
    gradient = matrix.grad.clone()
    optimizer.step()
    change = before - matrix.detach()
    singular = torch.linalg.svdvals(change)
    assert singular.max() / singular.min() < 8  # Newton–Schulz leaves them within about 0.5-1.5×
    spread = torch.linalg.svdvals(gradient)
    assert spread.max() / spread.min() > 1000  # the gradient's own spread
    assert torch.sum(change * gradient) > 0  # a descent direction


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


MUON_NOTE = "note: train.optimizer muon orthogonalises in bfloat16"


def test_resuming_with_another_optimizer_is_refused_before_any_note(
    corpus_file, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(progress, "cpu_multiplies_bfloat16", lambda: False)  # the note's CPU
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=20)
    train(from_dict(raw), progress=False)
    raw["train"].update(optimizer="muon", max_iters=40)
    capsys.readouterr()
    with pytest.raises(UserError, match="trained with train.optimizer adamw, the config says muon"):
        train(from_dict(raw), resume=True, progress=False)
    assert MUON_NOTE not in capsys.readouterr().out  # the error is the one thing said


def test_muon_on_a_cpu_without_bfloat16_units_says_it_is_slow_there_once(
    corpus_file, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(progress, "cpu_multiplies_bfloat16", lambda: False)
    train(from_dict(muon_raw(corpus_file, tmp_path / "slow", max_iters=2)), progress=False)
    assert capsys.readouterr().out.count(MUON_NOTE) == 1
    monkeypatch.setattr(progress, "cpu_multiplies_bfloat16", lambda: True)
    train(from_dict(muon_raw(corpus_file, tmp_path / "fast", max_iters=2)), progress=False)
    assert MUON_NOTE not in capsys.readouterr().out


def test_a_torch_without_muon_gets_one_clear_error(corpus_file, tmp_path, monkeypatch):
    monkeypatch.delattr(torch.optim, "Muon")
    lacks = r"needs torch.optim.Muon, which torch .* lacks.*train.optimizer: adamw"
    with pytest.raises(UserError, match=lacks):
        train(from_dict(muon_raw(corpus_file, tmp_path / "run")), progress=False)
    assert not (tmp_path / "run" / "last.pt").exists()


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
