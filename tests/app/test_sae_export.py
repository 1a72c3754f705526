"""A run's feature dictionary exported for SAELens (`export --format sae-lens`): SAELens's TopK layout, read
at TransformerLens's name of the same hook point, giving tinygpt's feature activations on a prompt.

SAELens itself cannot be installed beside this project's TransformerLens (docs/features.md), so the test
that loads the export in SAELens skips here with that reason; the others hold the files to SAELens's
documented TopK formula, z = relu(topk((x − b_dec) @ W_enc + b_enc)), computed from the exported tensors.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import need_extra

import tinygpt
from tinygpt.app.cli import main
from tinygpt.app.export import export
from tinygpt.app.lens_bridge import lens_hook_name, transformer_lens_model
from tinygpt.explain.features import dictionary_of

PROMPT = "KING:\nThe fool"
SIZE, K = 64, 4
NO_SAE_LENS = (
    "sae-lens cannot be installed beside the lens extra: sae-lens 6.54.12 requires "
    "transformer-lens>=2.16.1,<4.0.0 and the lens extra pins transformer-lens==4.3.0 (docs/features.md)"
)


@pytest.fixture(scope="module")
def run(tiny_run: Path, tmp_path_factory) -> Path:
    """A copy of the tiny run with a small dictionary of layer 1's mlp_out."""
    copy = Path(shutil.copytree(tiny_run, tmp_path_factory.mktemp("sae") / "run"))
    shutil.rmtree(copy / "features", ignore_errors=True)
    made = ["--layer", "1", "--positions", "2000", "--size", str(SIZE), "--k", str(K), "--quiet"]
    assert main(["features", str(copy), *made]) == 0
    return copy


@pytest.fixture(scope="module")
def exported(run: Path, tmp_path_factory) -> Path:
    need_extra("safetensors", "hf")
    out = tmp_path_factory.mktemp("export") / "sae"
    export(run / "best.pt", out, "sae-lens")
    return out


def activations(run: Path, name: str = "blocks.1.mlp_out") -> torch.Tensor:
    """tinygpt's activation at a hook point on PROMPT: (T, d)."""
    _, cache = tinygpt.load(run).run_with_cache(PROMPT, name)
    return cache[name][0]


def test_the_files_are_saelens_topk_layout_with_tinygpt_dictionary_folded_in(run, exported):
    from safetensors.torch import load_file

    assert sorted(p.name for p in exported.iterdir()) == ["cfg.json", "sae_weights.safetensors"]
    cfg = json.loads((exported / "cfg.json").read_text(encoding="utf-8"))
    assert (cfg["architecture"], cfg["d_in"], cfg["d_sae"], cfg["k"]) == ("topk", 32, SIZE, K)
    assert cfg["apply_b_dec_to_input"] and cfg["normalize_activations"] == "none"
    assert not cfg["rescale_acts_by_decoder_norm"] and cfg["dtype"] == "float32"
    assert cfg["metadata"]["hook_name"] == "blocks.1.hook_mlp_out" == lens_hook_name(1, "mlp_out")
    assert cfg["metadata"]["sae_lens_version"].startswith("6.") and not cfg["metadata"]["prepend_bos"]
    ours = tinygpt.load(run).feature_file(1, "mlp_out")
    tensors = load_file(str(exported / "sae_weights.safetensors"))
    assert {name: tuple(t.shape) for name, t in tensors.items()} == {
        "W_enc": (32, SIZE), "b_enc": (SIZE,), "W_dec": (SIZE, 32), "b_dec": (32,)}  # fmt: skip
    s = ours.input_scale
    torch.testing.assert_close(tensors["W_enc"], ours.W_enc * s)
    torch.testing.assert_close(tensors["b_enc"], ours.b_enc)
    torch.testing.assert_close(tensors["W_dec"], ours.W_dec / s)
    torch.testing.assert_close(tensors["b_dec"], ours.b_dec / s)


def test_saelens_formula_on_the_exported_tensors_gives_tinygpts_feature_activations(run, exported):
    from safetensors.torch import load_file

    t = load_file(str(exported / "sae_weights.safetensors"))
    x = activations(run)  # (T, d)
    pre = (x - t["b_dec"]) @ t["W_enc"] + t["b_enc"]  # (T, n)
    values, indices = pre.topk(K, dim=-1)
    theirs = torch.zeros_like(pre).scatter_(-1, indices, values.relu())  # (T, n)
    dictionary = dictionary_of(tinygpt.load(run).feature_file(1, "mlp_out"))
    with torch.no_grad():
        ours = dictionary.encode(x)
        torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)
        assert (ours > 0).sum(-1).max() <= K and ours.abs().sum() > 0  # something fired
        rebuilt = theirs @ t["W_dec"] + t["b_dec"]  # SAELens's decode: the layer's own units, as tinygpt's
        torch.testing.assert_close(rebuilt, dictionary.decode(ours), atol=1e-5, rtol=0)


def test_transformer_lens_reads_the_same_activation_under_the_exported_hook_name(run):
    need_extra("transformer_lens", "lens")
    bridge = transformer_lens_model(run / "best.pt")
    _, cache = bridge.run_with_cache(bridge.to_tokens(PROMPT))
    for site in ("mlp_out", "resid_post"):
        theirs = cache[lens_hook_name(1, site)][0]  # (T, d)
        torch.testing.assert_close(theirs, activations(run, f"blocks.1.{site}"), atol=1e-4, rtol=0)


def test_saelens_loads_the_export_and_gives_tinygpts_feature_activations(run, exported):
    sae_lens = pytest.importorskip("sae_lens", reason=NO_SAE_LENS)
    sae = sae_lens.SAE.load_from_disk(str(exported), device="cpu")
    assert sae.cfg.metadata.hook_name == "blocks.1.hook_mlp_out"
    x = activations(run)
    dictionary = dictionary_of(tinygpt.load(run).feature_file(1, "mlp_out"))
    with torch.no_grad():
        torch.testing.assert_close(sae.encode(x), dictionary.encode(x), atol=1e-5, rtol=1e-5)


def test_the_command_exports_and_says_what_is_wrong_in_one_line(run, tmp_path, capsys):
    need_extra("safetensors", "hf")
    checkpoint = str(run / "best.pt")
    assert main(["export", checkpoint, str(tmp_path / "a"), "--format", "sae-lens", "--layer", "1"]) == 0
    assert "it reads TransformerLens's blocks.1.hook_mlp_out" in capsys.readouterr().out
    cases = {
        ("--format", "hf", "--layer", "1"): "--layer and --site choose the dictionary of --format sae-lens",
        ("--format", "sae-lens", "--layer", "0"): "there are no features at",
    }
    for options, said in cases.items():
        assert main(["export", checkpoint, str(tmp_path / "b"), *options]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], err
        assert not (tmp_path / "b").exists()
