"""Features: `tinygpt features` on a tiny trained run, its file, its quality numbers, its views, and steering.

The dictionary is trained once for the module (20,000 positions, 128 latents, k 8: seconds on one
thread); the quality numbers are also checked on a dictionary built by hand, whose every number a few
lines of plain torch compute independently.
"""

import io
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tinygpt.explain.features as features_module
from tinygpt.app.api import features, load
from tinygpt.app.cli import main
from tinygpt.errors import UserError
from tinygpt.explain.dictionary import TopKDictionary
from tinygpt.explain.explanations import top_contexts
from tinygpt.explain.feature_notes import DESCRIBED, ranked
from tinygpt.explain.feature_quality import assess, evaluation_windows
from tinygpt.explain.features import Options, dictionary_bytes, dictionary_of, step_zero_model
from tinygpt.explain.validation import corpus_of
from tinygpt.files.checkpoint import read_checkpoint, save_checkpoint
from tinygpt.files.feature_file import FeatureFile, read_features
from tinygpt.files.integrity import digest, seal

SIZE, K = 128, 8
DAMAGE = ["flipped-byte", "truncated", "foreign", "a-checkpoint-in-its-place", "format-version-1"]
MADE = ["--positions", "20000", "--size", str(SIZE), "--k", str(K), "--quiet"]


@pytest.fixture(scope="module")
def run(tiny_run: Path) -> Path:
    """The tiny run with its layer-1 mlp_out features made by the command."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["features", str(tiny_run), *MADE]) == 0
    finally:
        torch.set_num_threads(before)
    return tiny_run


def feature_file(run: Path) -> Path:
    return run / "features" / "mlp_out.1.pt"


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_the_file_loads_with_the_safe_loader_and_round_trips(run):
    raw = torch.load(feature_file(run), weights_only=True)
    assert raw["kind"] == "tinygpt features" and raw["format_version"] == 2
    assert raw["W_enc"].shape == (32, SIZE) and raw["W_dec"].shape == (SIZE, 32)
    assert raw["b_enc"].shape == (SIZE,) and raw["b_dec"].shape == (32,)
    assert (raw["layer"], raw["site"], raw["k"]) == (1, "mlp_out", K) and raw["input_scale"] > 0
    assert len(json.loads(raw["features"])) == SIZE and raw["record"]["positions"] == 20000
    checkpoint = read_checkpoint(run / "best.pt")
    found = read_features(feature_file(run), checkpoint, "remake")
    assert isinstance(found, FeatureFile) and torch.equal(found.W_dec, raw["W_dec"])
    x = torch.randn(5, 32)
    dictionary = dictionary_of(found)
    by_hand = TopKDictionary(32, SIZE, K, raw["input_scale"])
    by_hand.load_state_dict({k: raw[k] for k in ("W_enc", "b_enc", "W_dec", "b_dec")} | {"_extra_state": {
        "k": K, "input_scale": raw["input_scale"]}})  # fmt: skip
    assert torch.allclose(dictionary(x)[0], by_hand(x)[0])


def test_quality_and_the_control_are_in_the_record_and_training_did_something(run):
    record = torch.load(feature_file(run), weights_only=True)["record"]
    ours, control = record["quality"], record["control"]["quality"]
    for numbers in (ours, control):
        assert numbers["l0"] <= K and 0 <= numbers["dead_fraction"] <= 1 and numbers["positions"] > 0
    assert ours["explained_variance"] > 0.8 and ours["recovered"] > 0.8
    assert ours["zero_loss"] > ours["loss"]  # the MLP matters to the trained model
    assert control["loss"] > ours["loss"] + 1  # the step-0 model knows nothing yet
    assert ours["precision"] > control["precision"]


def test_the_control_model_is_the_runs_step_zero_weights(tiny_run):
    from tinygpt.config.run_config import from_dict
    from tinygpt.training.distributed import Ranks
    from tinygpt.training.set_up import set_up

    checkpoint = read_checkpoint(tiny_run / "best.pt")
    rebuilt = step_zero_model(checkpoint)
    fresh = set_up(from_dict(checkpoint.config), Ranks()).model
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(rebuilt.state_dict()[name], tensor), name


def test_quality_numbers_are_what_a_hand_computation_gives(tiny_run):
    """A dictionary of ±each axis with k 1 keeps, at each position, the largest coordinate alone."""
    checkpoint = read_checkpoint(tiny_run / "best.pt")
    model = checkpoint.build_model().eval()
    val = corpus_of(checkpoint, 16, tiny_run / "best.pt").val
    x, y = evaluation_windows(val, 16, positions=1024)
    d, hook = 32, "blocks.1.mlp_out"
    dictionary = TopKDictionary(d, 2 * d, k=1)
    with torch.no_grad():
        dictionary.W_dec.copy_(torch.cat([torch.eye(d), -torch.eye(d)]))  # (2d, d)
        dictionary.W_enc.copy_(dictionary.W_dec.t())
    found = assess(model, dictionary, hook, x, y).summary

    def largest_only(a: torch.Tensor) -> torch.Tensor:
        keep = F.one_hot(a.abs().argmax(dim=-1), d).bool()
        return torch.where(keep, a, torch.zeros_like(a))

    def loss(replace) -> float:
        with torch.no_grad(), model.hooks({hook: lambda a, _n: replace(a)} if replace else {}):
            logits, _ = model(x)
        return F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()

    _, cache = model.run_with_cache(x, names=[hook])
    acts = cache[hook].reshape(-1, d).detach()  # (N, d)
    error = (acts - largest_only(acts)).pow(2).sum()
    spread = (acts - acts.mean(dim=0)).pow(2).sum()
    column = acts.abs().argmax(dim=1) + d * (
        acts.gather(1, acts.abs().argmax(dim=1, keepdim=True)) < 0
    ).squeeze(1)
    densities = torch.bincount(column, minlength=2 * d).float() / len(acts)
    clean, spliced, zero = loss(None), loss(largest_only), loss(torch.zeros_like)
    assert found["l0"] == pytest.approx(1.0)
    assert found["explained_variance"] == pytest.approx(1 - (error / spread).item(), abs=1e-5)
    assert found["dead_fraction"] == pytest.approx((densities == 0).float().mean().item())
    assert found["dense_fraction"] == pytest.approx((densities > 0.1).float().mean().item())
    assert found["loss"] == pytest.approx(clean, abs=1e-5)
    assert found["spliced_loss"] == pytest.approx(spliced, abs=1e-5)
    assert found["loss_increase"] == pytest.approx(spliced - clean, abs=1e-5)
    assert found["recovered"] == pytest.approx((zero - spliced) / (zero - clean), abs=1e-4)


def test_the_spliced_loss_is_the_loss_with_a_hook_replacing_by_the_reconstruction(run):
    checkpoint = read_checkpoint(run / "best.pt")
    model = checkpoint.build_model().eval()
    dictionary = dictionary_of(read_features(feature_file(run), checkpoint, "remake"))
    x, y = evaluation_windows(corpus_of(checkpoint, 16, run / "best.pt").val, 16, positions=2048)
    hook = "blocks.1.mlp_out"

    def reconstructed(a: torch.Tensor, _name: str) -> torch.Tensor:
        return dictionary(a.reshape(-1, a.size(-1)))[0].view_as(a)

    with torch.no_grad(), model.hooks({hook: reconstructed}):
        _, by_hook = model(x, y)
    found = assess(model, dictionary, hook, x, y).summary
    assert found["spliced_loss"] == pytest.approx(by_hook.item(), abs=1e-5)
    assert found["spliced_loss"] != pytest.approx(found["loss"], abs=1e-6)  # the splice did change something


@pytest.mark.parametrize("hook", ["blocks.0.mlp_out", "blocks.0.resid_post", "blocks.1.resid_post"])
def test_assess_gives_what_whole_passes_with_a_replacing_hook_give_at_every_site(run, hook):
    """assess runs the blocks before the hook once and the rest three times from there: the losses and
    the last stream's scale are those of whole forward passes, at a first layer and at the last one."""
    checkpoint = read_checkpoint(run / "best.pt")
    model = checkpoint.build_model().eval()
    x, y = evaluation_windows(corpus_of(checkpoint, 16, run / "best.pt").val, 16, positions=2048)
    torch.manual_seed(0)
    dictionary = TopKDictionary(32, SIZE, K).eval()

    def loss(replace) -> float:
        hooks = {hook: lambda a, _n: replace(a)} if replace else {}
        with torch.no_grad(), model.hooks(hooks):
            return model(x, y)[1].item()

    def spliced(a: torch.Tensor) -> torch.Tensor:
        return dictionary(a.reshape(-1, a.size(-1)))[0].view_as(a)

    with torch.no_grad():
        _, cache = model.run_with_cache(x, names=[hook, "blocks.1.resid_post"])
    assert model.config.n_layer == 2
    last = cache["blocks.1.resid_post"]  # (W, T, C): the last stream
    scale = (last.var(dim=-1, unbiased=False) + 1e-5).sqrt().mean().item()
    found = assess(model, dictionary, hook, x, y)
    assert found.summary["loss"] == pytest.approx(loss(None), abs=1e-5)
    assert found.summary["spliced_loss"] == pytest.approx(loss(spliced), abs=1e-5)
    assert found.summary["zero_loss"] == pytest.approx(loss(torch.zeros_like), abs=1e-5)
    assert found.stream_scale == pytest.approx(scale, rel=1e-5)
    assert torch.equal(found.indices, dictionary.top(cache[hook].reshape(-1, 32))[1])


def test_each_contexts_value_and_shading_are_what_the_model_computes_there(run):
    """The notes' contexts, recomputed: the model's activation at the hook on the described text, through
    the dictionary, is each context's value at its character and its shading along its text."""
    checkpoint = read_checkpoint(run / "best.pt")
    model = checkpoint.build_model().eval()
    file = read_features(feature_file(run), checkpoint, "remake")
    x, _ = evaluation_windows(corpus_of(checkpoint, 16, run / "best.pt").val, 16)
    text = "".join(checkpoint.chars[i] for i in x.flatten().tolist())[:DESCRIBED]
    with torch.no_grad():
        _, cache = model.run_with_cache(x, names=["blocks.1.mlp_out"])
        latents = dictionary_of(file).encode(cache["blocks.1.mlp_out"].reshape(-1, 32))[: len(text)]  # (N, n)
    checked = 0
    for note in ranked(file.features)[:20]:
        acts = latents[:, note["feature"]]  # (N,)
        for context, found in zip(note["contexts"], top_contexts(text, acts, 5), strict=False):
            assert context["text"] == found.text and context["index"] == found.index
            assert context["value"] == pytest.approx(acts[found.position].item(), abs=1e-5)
            start = found.position - found.index
            assert context["shading"] == pytest.approx(
                acts[start : start + len(found.text)].tolist(), abs=1e-4
            )
            assert context["shading"][found.index] == pytest.approx(context["value"], abs=1e-4)
            checked += 1
    assert checked >= 50


@pytest.mark.parametrize("damage", DAMAGE, ids=DAMAGE)
def test_a_damaged_or_foreign_file_is_refused_by_name_in_one_line(run, tmp_path, capsys, damage):
    copy = Path(shutil.copytree(run, tmp_path / "copy"))
    path = feature_file(copy)
    data = bytearray(path.read_bytes())
    if damage == "flipped-byte":
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    elif damage == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "a-checkpoint-in-its-place":
        shutil.copy(copy / "best.pt", path)
    elif damage == "format-version-1":  # a whole, sealed file of the first layout: notes as a list
        raw = torch.load(path, weights_only=True)
        payload = {k: v for k, v in raw.items() if k != "digest"}
        payload |= {"format_version": 1, "features": json.loads(raw["features"])}
        data = io.BytesIO()
        torch.save({**payload, "digest": digest(payload)}, data)
        path.write_bytes(bytes(seal(bytearray(data.getbuffer()))))
    else:  # the run's model changed since (trained further): the same name, another model
        checkpoint = read_checkpoint(copy / "best.pt")
        checkpoint.weights["wte.weight"] = checkpoint.weights["wte.weight"] + 0.01
        save_checkpoint(checkpoint, copy / "best.pt")
    assert main(["inspect", str(copy), "--features"]) == 2
    line = error_line(capsys)
    assert str(path) in line and "tinygpt features" in line
    expected = {
        "a-checkpoint-in-its-place": "is not a tinygpt feature file",
        "flipped-byte": "damaged|corrupted",
        "truncated": "truncated or corrupted",
        "foreign": "another model",
        "format-version-1": "format version 1, not one this tinygpt reads; make it again",
    }
    assert re.search(expected[damage], line)


def test_inspect_lists_best_described_first_and_shows_one_feature(run, capsys):
    assert main(["inspect", str(run), "--features"]) == 0
    listed = capsys.readouterr().out
    notes = ranked(json.loads(torch.load(feature_file(run), weights_only=True)["features"]))
    assert "explained variance" in listed and "control: step-0 weights" in listed
    first = re.search(r"best-described first:\n.*\n\s+(\d+)\s", listed).group(1)
    assert int(first) == notes[0]["feature"]
    assert main(["inspect", str(run), "--features", "--feature", first]) == 0
    detail = capsys.readouterr().out
    assert f"feature {first} of blocks.1.mlp_out" in detail and "[" in detail and "promotes" in detail
    view = load(run).features()
    assert repr(view.feature(int(first))) + "\n" == detail and repr(view) + "\n" == listed
    assert "<mark>" in view.feature(int(first))._repr_html_() and "<table" in view._repr_html_()


def steered(run: Path) -> tuple[int, float]:
    """The best-described feature, and a value well above its largest activation."""
    note = ranked(json.loads(torch.load(feature_file(run), weights_only=True)["features"]))[0]
    return note["feature"], 4 * note["max"] + 1


def test_steering_changes_the_sample_and_raises_the_promoted_characters(run, capsys):
    feature, value = steered(run)
    common = [
        "sample",
        "--checkpoint",
        str(run),
        "--prompt",
        "KING:",
        "--max-new-tokens",
        "80",
        "--seed",
        "1",
    ]
    assert main(common) == 0
    plain = capsys.readouterr().out
    assert main([*common, "--steer", f"1.{feature}={value}"]) == 0
    out, err = capsys.readouterr()
    assert out != plain
    change = float(re.search(r"\(([+-][\d.]+) nats\)", err).group(1))
    assert change > 0
    lm = load(run)
    assert lm.sample("KING:", 80, seed=1, steer={f"1.{feature}": value}) == [out.rstrip("\n")]
    assert lm.steering("KING:", {f"mlp_out.1.{feature}": value}).effects[0]["change"] == pytest.approx(
        change, abs=1e-3
    )
    assert lm.sample("KING:", 80, seed=1) == [plain.rstrip("\n")]  # the hook is gone after


def test_a_clamp_sets_the_feature_and_keeps_the_rest_of_the_activation(run):
    from tinygpt.explain.steering import Steer, steering_hooks

    lm = load(run)
    features = lm.feature_file(1)
    dictionary = dictionary_of(features)
    feature, value = steered(run)
    (clamp,) = steering_hooks([Steer(features, feature, value)]).values()
    acts = torch.randn(3, 5, 32)
    after = clamp(acts, "blocks.1.mlp_out")
    latents = dictionary.encode(acts.reshape(-1, 32))
    row = dictionary.W_dec[feature] / dictionary.input_scale
    expected = acts.reshape(-1, 32) + (value - latents[:, feature]).unsqueeze(1) * row
    assert torch.allclose(after.reshape(-1, 32), expected, atol=1e-5)


def test_layer_all_makes_a_file_per_layer_and_then_a_view_asks_which(run, tmp_path, capsys):
    copy = Path(shutil.copytree(run, tmp_path / "copy"))
    shutil.rmtree(copy / "features")
    assert (
        main(["features", str(copy), "--layer", "all", "--positions", "2000", "--size", "64", "--quiet"]) == 0
    )
    assert sorted(p.name for p in (copy / "features").iterdir()) == ["mlp_out.0.pt", "mlp_out.1.pt"]
    capsys.readouterr()
    assert main(["inspect", str(copy), "--features"]) == 2
    assert "holds mlp_out.0.pt, mlp_out.1.pt; choose one with --layer" in error_line(capsys)
    assert main(["inspect", str(copy), "--features", "--layer", "0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)  # valid JSON: NaN written null
    assert data["layer"] == 0 and len(data["features"]) == 64
    assert load(copy).features(layer=0).file.layer == 0


def no_checkpoint(tmp_path: Path, run: Path) -> list[str]:
    (tmp_path / "empty").mkdir()
    return ["features", str(tmp_path / "empty")]


BAD = {  # id: (arguments, or a function of (tmp_path, run) giving them; what the one line says)
    "layer-missing": (lambda t, r: ["features", str(r), "--layer", "9"], "--layer 9 does not exist"),
    "k-above-size": (lambda t, r: ["features", str(r), "--size", "8", "--k", "9"], "--k 9 is more than"),
    "k-zero": (lambda t, r: ["features", str(r), "--k", "0"], "--k 0 is below 1"),
    "size-zero": (lambda t, r: ["features", str(r), "--size", "0"], "--size 0 is below 1"),
    "positions-zero": (lambda t, r: ["features", str(r), "--positions", "0"], "--positions 0 is below 1"),
    "positions-absurd": (  # once accepted: a bar of 195,312,500,000 steps
        lambda t, r: ["features", str(r), "--positions", "99999999999999"],
        "--positions 99,999,999,999,999 would take a million steps and more; use at most 1,000,000,000",
    ),
    "size-beyond-memory": (  # a trillion latents: the allocator's traceback before this check
        lambda t, r: ["features", str(r), "--size", str(10**12)],
        "--size 1,000,000,000,000 is too large to train here",
    ),
    "layer-not-a-number": (lambda t, r: ["features", str(r), "--layer", "one"], "is not a layer"),
    "run-without-checkpoint": (no_checkpoint, "holds no checkpoint (best.pt)"),
    "no-features-yet": (
        lambda t, r: ["inspect", str(r), "--features", "--layer", "0"],
        "there are no features",
    ),
    "feature-missing": (
        lambda t, r: ["inspect", str(r), "--features", "--feature", "999"],
        "--feature 999 does",
    ),
    "steer-malformed": (
        lambda t, r: ["sample", "--checkpoint", str(r), "--steer", "1.x=2"],
        "--steer '1.x=2'",
    ),
    "steer-feature-missing": (
        lambda t, r: ["sample", "--checkpoint", str(r), "--steer", "1.999=2"],
        "feature 999",
    ),
    "steer-overflow": (  # past float32: the logits were NaN, and every sampled character the first
        lambda t, r: ["sample", "--checkpoint", str(r), "--steer", "1.0=1e40"],
        "--steer mlp_out.1.0=1e+40: the model's logits on the prompt are no longer numbers (past float32); "
        "mlp_out.1.0 reads at most",
    ),
}


def test_a_dictionary_larger_than_free_memory_is_refused(monkeypatch):
    options, cpu = Options(layer=0, size=4096, k=16), torch.device("cpu")
    weights = 2 * 4096 * 128  # encoder and decoder
    need = dictionary_bytes(4096, 128, options.batch)
    assert need == 4 * (weights * 4 + weights + 2 * options.batch * 4096)  # float32: Adam's state, the batch
    monkeypatch.setattr(features_module, "free_memory", lambda device: need)
    options.check_fits(128, cpu)  # just enough: nothing to say
    monkeypatch.setattr(features_module, "free_memory", lambda device: need - 1)
    with pytest.raises(
        UserError, match=r"^--size 4,096 is too large to train here: .* a layer 128 wide needs"
    ):
        options.check_fits(128, cpu)
    monkeypatch.setattr(features_module, "free_memory", lambda device: None)  # unknown: no check
    options.check_fits(128, cpu)


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_is_one_line_and_exit_2(run, tmp_path, capsys, case):
    arguments, expected = BAD[case]
    try:
        code = main(arguments(tmp_path, run))
    except SystemExit as e:  # argparse's own complaints leave from the parser, with the same one line
        code = e.code
    assert code == 2
    assert expected in error_line(capsys)
    assert not (tmp_path / "empty" / "features").exists()


def test_the_api_makes_the_file_the_command_makes(run, tmp_path):
    copy = Path(shutil.copytree(run, tmp_path / "copy"))
    shutil.rmtree(copy / "features")
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the fixture made the command's: the same reduction order
    try:
        view = features(copy, layer=1, size=SIZE, k=K, positions=20000, device="cpu", progress=False)
    finally:
        torch.set_num_threads(before)
    command = torch.load(feature_file(run), weights_only=True)
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        assert torch.equal(getattr(view.file, name), command[name]), name
    assert view.file.features == json.loads(command["features"])
    assert repr(view).startswith(repr(load(copy).features(layer=1)).splitlines()[0])


def test_the_api_says_a_wrong_argument_in_one_user_error(run):
    with pytest.raises(UserError, match=r"--positions 'many' \(a str\) is not a whole number"):
        features(run, positions="many")
    with pytest.raises(UserError, match="run 3 .* is not a path"):
        features(3)
    lm = load(run)
    with pytest.raises(UserError, match="--layer '1'"):
        lm.features(layer="1")
    with pytest.raises(UserError, match="is not a dict"):
        lm.sample("KING:", 5, steer=5)
    for steer in ({"1.0": 1e40}, {"1.0": 1.0, "1.1": -1e30}):  # past float32, one steer or one of two
        with pytest.raises(UserError, match="logits on the prompt are no longer numbers"):
            lm.sample("KING:", 5, steer=steer)
        with pytest.raises(UserError, match="logits on the prompt are no longer numbers"):
            lm.steering("KING:", steer)
