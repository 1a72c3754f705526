from pathlib import Path

import pytest
import yaml

from tinygpt.config import RunConfig, from_dict, load_config, reference
from tinygpt.errors import UserError

CONFIGS = sorted(Path(__file__).resolve().parents[1].joinpath("configs").glob("*.yaml"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    config = load_config(path)
    assert isinstance(config, RunConfig)
    assert config.out_dir.startswith("checkpoints/")


def test_values_and_defaults(tmp_path):
    config = load_config(write(tmp_path, "model: {n_layer: 2}\ntrain: {learning_rate: 1e-3}\n"))
    assert config.model.n_layer == 2 and config.model.n_embd == 384  # the rest are defaults
    assert config.train.learning_rate == 1e-3  # YAML 1.1 reads 1e-3 as text; accepted as a number
    assert config.out_dir == "checkpoints/run"  # named after the file


def test_overrides_apply_in_order_with_yaml_values(tmp_path):
    path = write(tmp_path, "train: {max_iters: 10}\n")
    config = load_config(
        path,
        [
            "train.max_iters=20",
            "train.betas=[0.8, 0.95]",
            "model.bias=false",
            "out_dir=elsewhere",
            "train.max_iters=30",
        ],
    )
    assert config.train.max_iters == 30
    assert config.train.betas == [0.8, 0.95]
    assert config.model.bias is False
    assert config.out_dir == "elsewhere"


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "train: {lerning_rate: 0.1}",
            r"unknown key 'train.lerning_rate'; did you mean 'train.learning_rate'",
        ),
        ("trian: {}", r"unknown key 'trian'; did you mean 'train'"),
        (
            "model: {n_layer: two}",
            r"model.n_layer = 'two' is not allowed; model.n_layer must be an integer ≥ 1",
        ),
        ("model: {n_layer: 2.5}", r"model.n_layer = 2.5 .* an integer"),
        ("model: {n_embd: 0}", r"model.n_embd = 0 .* ≥ 1"),
        ("model: {n_head: -3}", r"model.n_head = -3"),
        ("model: {dropout: 1.0}", r"model.dropout = 1.0 .* a number ≥ 0 and < 1"),
        ("model: {dropout: -0.1}", r"model.dropout"),
        ("model: {bias: 1}", r"model.bias = 1 .* true or false"),
        ("train: {learning_rate: 0}", r"train.learning_rate = 0 .* > 0"),
        ("train: {learning_rate: .nan}", r"train.learning_rate = nan"),
        ("train: {device: tpu}", r"train.device = 'tpu' .* one of auto, cpu, cuda, mps"),
        ("train: {dtype: float8}", r"one of auto, float32, bfloat16, float16"),
        ("train: {betas: [0.9]}", r"train.betas"),
        ("model: {n_embd: 100, n_head: 6}", r"n_embd = 100 is not divisible by model.n_head = 6"),
        ("train: {learning_rate: 1e-4, min_lr: 1e-3}", r"min_lr .* above"),
        ("model: [1, 2]", r"section 'model' must be a mapping"),
        ("- a list", r"top level must be a mapping"),
        ("out_dir: 3", r"out_dir must be a path"),
        ("model:\n  n_layer: 2\n n_head: 3\n", r"not valid YAML at line 3"),
        ("model: {n_layer: [}", r"not valid YAML at line 1"),
    ],
)
def test_bad_configs_get_one_clear_message(tmp_path, text, message):
    with pytest.raises(UserError, match=message):
        load_config(write(tmp_path, text))


def test_bad_override_and_missing_file(tmp_path):
    path = write(tmp_path, "")
    with pytest.raises(UserError, match="section.key=value"):
        load_config(path, ["train.max_iters"])
    with pytest.raises(UserError, match="unknown key 'train.max_iter'; did you mean 'train.max_iters'"):
        load_config(path, ["train.max_iter=3"])
    with pytest.raises(UserError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(UserError, match="is a directory"):
        load_config(tmp_path)


def test_resolved_config_round_trips_through_yaml(tmp_path):
    config = load_config(CONFIGS[0])
    again = from_dict(yaml.safe_load(yaml.safe_dump(config.to_dict())))
    assert again == config


def test_reference_table_lists_every_key():
    table = reference()
    for key in ["model.n_embd", "data.corpus", "train.grad_accum_steps", "train.compile", "out_dir"]:
        assert f"`{key}`" in table
