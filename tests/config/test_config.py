import os
from pathlib import Path

import pytest
import yaml
from conftest import UNOPENABLE, unopenable_path

from tinygpt.config.run_config import (
    SHIPPED_CONFIGS,
    RunConfig,
    config_path,
    from_dict,
    load_config,
    reference,
    shipped_configs,
)
from tinygpt.config.yaml_file import MAX_CONFIG_BYTES
from tinygpt.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(ROOT.joinpath("configs").glob("*.yaml"))


def write(tmp_path: Path, text: str) -> Path:
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_the_attention_only_induction_config_is_the_induction_config_without_mlps():
    """The two induction recipes stay one recipe: only model.mlp and out_dir differ."""
    with_mlps, without = (vars(load_config(name)) for name in ("induction", "induction_attention_only"))
    assert with_mlps["model"].mlp and not without["model"].mlp
    assert vars(with_mlps["model"]) | {"mlp": False} == vars(without["model"])
    assert with_mlps["data"] == without["data"] and with_mlps["train"] == without["train"]


def test_the_float32_half_hour_config_is_cpu_large_cut_to_what_its_budget_measured():
    """configs/cpu_large_float32.yaml is cpu_large.yaml with only the changes its header gives."""
    changes = ["model.n_layer=4", "model.attention_dropout=false", "train.max_iters=4200"]
    changes += ["train.max_minutes=29"]
    changes += ["train.timeline=false", "train.eval_interval=1000", "train.dtype=float32"]
    changes += ["out_dir=checkpoints/cpu_large_float32"]
    assert vars(load_config("cpu_large_float32")) == vars(load_config("cpu_large", changes))


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
        (  # the hint fits the model: not "e.g. 192" for a 32-wide one
            "model: {n_embd: 32, n_head: 3}",
            r"multiple of n_head \(e.g. 30 or 33\) or n_head as a divisor of n_embd \(e.g. 2 or 4\)",
        ),
        (  # an absurd width: the hint is found near n_head, not by trying every number up to n_embd
            "model: {n_embd: 1180591620717411303424, n_head: 3}",
            r"n_embd = 1180591620717411303424 is not divisible .* divisor of n_embd \(e.g. 2 or 4\)",
        ),
        (
            "model: {n_embd: 64, n_head: 1180591620717411303425}",
            r"multiple of n_head \(e.g. 1180591620717411303425\) or .*divisor of n_embd \(e.g. 64\)$",
        ),
        # a block of 1 leaves attention one key, its own, and under 4 induction has nothing to score
        ("model: {block_size: 1}", r"model.block_size = 1 is not allowed; .* an integer ≥ 4"),
        ("model: {block_size: 3}", r"model.block_size = 3 is not allowed; .* an integer ≥ 4"),
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
    path = write(tmp_path, "model: {n_layer: 2}\n")
    with pytest.raises(UserError, match="section.key=value"):
        load_config(path, ["train.max_iters"])
    with pytest.raises(UserError, match="unknown key 'train.max_iter'; did you mean 'train.max_iters'"):
        load_config(path, ["train.max_iter=3"])
    with pytest.raises(UserError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(UserError, match="is a directory"):
        load_config(tmp_path)


@pytest.mark.parametrize(
    "override, message",
    [
        ("foo.bar=1", "--set foo.bar=1: unknown key 'foo'; valid keys: model, data, train, out_dir"),
        (
            "train.lerning_rate=1",
            "--set train.lerning_rate=1: unknown key 'train.lerning_rate'; did you mean",
        ),
        ("model.n_layer=two", "--set model.n_layer=two: model.n_layer = 'two' is not allowed; model.n_layer"),
        ("train.device=tpu", "--set train.device=tpu: train.device = 'tpu' is not allowed"),
        ("model=3", "--set model=3: model is a section; set one of its keys, e.g. --set model.n_layer=…"),
        ("out_dir.x=3", "--set out_dir.x=3: out_dir is a path, not a section"),
    ],
)
def test_a_mistake_in_an_override_names_the_override_not_the_file(tmp_path, override, message):
    path = write(tmp_path, "model: {n_layer: 2}\n")
    with pytest.raises(UserError) as caught:
        load_config(path, [override])
    assert str(caught.value).startswith(message)
    assert str(path) not in str(caught.value)


def test_a_rule_across_keys_broken_by_an_override_names_that_override_alone(tmp_path):
    path = write(tmp_path, "model: {n_head: 2, n_embd: 64}\n")
    with pytest.raises(UserError) as caught:
        load_config(path, ["train.max_iters=5", "model.n_head=3"])
    assert str(caught.value).startswith("--set model.n_head=3: model.n_embd = 64 is not divisible")
    with pytest.raises(UserError) as caught:  # the rule's keys all from the file: the file, not the --set
        load_config(other := write(tmp_path / "b", "model: {n_head: 3, n_embd: 64}\n"), ["train.max_iters=5"])
    assert str(caught.value).startswith(f"{other}: model.n_embd = 64 is not divisible")
    assert load_config(path, ["out_dir=123"]).out_dir == "123"  # a path stays the text it was typed as


def test_a_mistake_in_the_file_still_names_the_file_when_overrides_are_given(tmp_path):
    path = write(tmp_path, "model: {n_layer: two}\n")
    with pytest.raises(UserError, match=f"^{path}: model.n_layer = 'two' is not allowed"):
        load_config(path, ["train.max_iters=5"])


@pytest.mark.parametrize(
    "text, key, lines",
    [
        ("model:\n  n_layer: 2\n  n_head: 2\n  n_layer: 4\n", "n_layer", (2, 4)),
        ("train: {max_iters: 3}\nmodel: {}\ntrain: {max_iters: 4}\n", "train", (1, 3)),
        ("model: {n_layer: 2, n_layer: 2}\n", "n_layer", (1, 1)),
    ],
)
def test_a_key_given_twice_is_an_error_naming_it_and_both_lines(tmp_path, text, key, lines):
    path = write(tmp_path, text)
    with pytest.raises(UserError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"config file {path} gives key '{key}' twice, at lines {lines[0]} and {lines[1]}; keep one of them"
    )


def test_merge_keys_are_not_mistaken_for_duplicates(tmp_path):
    merged = write(tmp_path, "base: &b {max_iters: 7}\ntrain:\n  <<: *b\n  batch_size: 2\n")
    with pytest.raises(UserError, match="unknown key 'base'"):  # merged fine; only the extra key is wrong
        load_config(merged)


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n", "null\n", "~\n", "{}\n"])
def test_an_empty_config_is_refused_instead_of_training_every_default(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(UserError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"config file {path} is empty: a config must at least say what it trains "
        f"(its model, data and train sections); start from a copy of {SHIPPED_CONFIGS / 'cpu.yaml'}"
    )


def test_a_config_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path):
    with pytest.raises(UserError, match="^config /dev/zero is not a regular file"):
        load_config("/dev/zero")  # endless: reading it would never end
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # nobody writes to it: opening it to read would wait for ever
    with pytest.raises(UserError, match=f"^config {fifo} is not a regular file"):
        load_config(fifo)


@pytest.mark.parametrize("kind", UNOPENABLE, ids=UNOPENABLE)
def test_a_config_path_the_system_cannot_open_is_one_error(tmp_path, kind):
    """A loop of links, a path through a file, a name too long: each once ended in an OSError's traceback."""
    path, reason = unopenable_path(tmp_path, kind, ".yaml")
    with pytest.raises(UserError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"config file {path} cannot be read ({reason}); pass a YAML file, e.g. configs/cpu.yaml"
    )


def test_a_config_larger_than_the_cap_is_refused(tmp_path):
    path = write(tmp_path, "# " + "x" * MAX_CONFIG_BYTES + "\nmodel: {n_layer: 2}\n")
    with pytest.raises(UserError, match=f"^config file {path} is larger than any config"):
        load_config(path)
    just_under = write(tmp_path, "model: {n_layer: 2}\n# " + "x" * (MAX_CONFIG_BYTES - 40) + "\n")
    assert load_config(just_under).model.n_layer == 2


def test_the_shipped_configs_are_the_top_level_ones_and_answer_to_their_names_from_any_directory(
    tmp_path, monkeypatch
):
    assert SHIPPED_CONFIGS == ROOT / "configs"  # one copy in the repository (the wheel carries it)
    shipped = ["cpu", "cpu_large", "cpu_large_float32", "cpu_long", "cpu_quick", "induction"]
    shipped += ["induction_attention_only", "shakespeare_char", "tiny"]
    assert shipped_configs() == shipped
    monkeypatch.chdir(tmp_path)  # outside the checkout: no configs/ here
    for given in ["cpu", "cpu.yaml", "configs/cpu.yaml", "./configs/cpu.yaml"]:
        assert config_path(given) == SHIPPED_CONFIGS / "cpu.yaml"
        config = load_config(given)
        assert config.model.n_layer == 4 and config.out_dir == "checkpoints/cpu"
    for given in ["other/cpu.yaml", "cpu.yml", "nowhere"]:
        assert config_path(given) == Path(given)  # not a shipped config's name: stays as given


def test_a_file_that_exists_wins_over_a_shipped_config_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "cpu.yaml").write_text("model: {n_layer: 1}\n")
    (tmp_path / "tiny").write_text("model: {n_layer: 3}\n")
    assert load_config("configs/cpu.yaml").model.n_layer == 1
    assert load_config("tiny").model.n_layer == 3


def test_a_missing_config_lists_the_shipped_names(tmp_path):
    with pytest.raises(UserError) as caught:
        load_config(tmp_path / "nowhere.yaml")
    assert str(caught.value) == (
        f"config file {tmp_path / 'nowhere.yaml'} does not exist; pass a YAML file or the name of a "
        "shipped config (cpu, cpu_large, cpu_large_float32, cpu_long, cpu_quick, induction, "
        "induction_attention_only, shakespeare_char, tiny), "
        "e.g. --config cpu"
    )


def test_resolved_config_round_trips_through_yaml(tmp_path):
    config = load_config(CONFIGS[0])
    again = from_dict(yaml.safe_load(yaml.safe_dump(config.to_dict())))
    assert again == config


def test_reference_table_lists_every_key():
    table = reference()
    for key in ["model.n_embd", "data.corpus", "train.grad_accum_steps", "train.compile", "out_dir"]:
        assert f"`{key}`" in table


@pytest.mark.parametrize("override", ["data.corpus=my\nfile.txt", "out_dir=a\nb", "train.max_iters=1\r\n"])
def test_a_line_break_in_an_override_is_refused_not_folded_into_a_space(tmp_path, override):
    """YAML reads 'my\\nfile.txt' as 'my file.txt': a --set value is refused whole instead."""
    path = write(tmp_path, "model: {n_layer: 2}\n")
    with pytest.raises(UserError) as caught:
        load_config(path, [override])
    assert str(caught.value) == f"--set {override!r}: holds a line break; give the key and value on one line"
    assert "\n" not in str(caught.value)  # one line, as every error


@pytest.mark.parametrize(
    "override, meant",
    [
        ("max_iters=20", "'max_iters'; did you mean 'train.max_iters'?"),  # a bare key: its section
        ("batch_size=8", "'batch_size'; did you mean 'train.batch_size'?"),
        (
            "train.lr=1e-3",
            "'train.lr'; did you mean 'train.learning_rate'?",
        ),  # not min_lr, the closest spelling
        ("train.iters=9", "'train.iters'; did you mean 'train.max_iters'?"),
        (
            "train.n_embd=64",
            "'train.n_embd'; did you mean 'model.n_embd'?",
        ),  # the right key, the wrong section
        ("model.d_model=64", "'model.d_model'; did you mean 'model.n_embd'?"),
        ("train.gradient_accumulation_steps=4", "did you mean 'train.grad_accum_steps'?"),
        ("train.dropout=0.1", "did you mean 'model.dropout'?"),
        ("model.optimizer=muon", "did you mean 'train.optimizer'?"),
        (
            "train.out_dir=runs/a",
            "out_dir stands alone, in no section: out_dir: PATH in the file, or --set out_dir=PATH",
        ),
        (
            "train.beta2=0.95",
            "did you mean 'train.betas'? it holds [beta1, beta2] as a list: train.betas=[0.9, 0.95]",
        ),
    ],
)
def test_nanogpt_and_common_names_suggest_the_key_they_mean(tmp_path, override, meant):
    path = write(tmp_path, "model: {n_layer: 2}\n")
    with pytest.raises(UserError) as caught:
        load_config(path, [override])
    assert str(caught.value).startswith(f"--set {override}: unknown key ")
    assert str(caught.value).endswith(meant)


def test_a_nanogpt_python_config_is_told_apart_from_yaml(tmp_path):
    """YAML read nanoGPT's `out_dir = 'out'` lines as one string: "the top level must be a mapping"."""
    path = tmp_path / "train_shakespeare_char.py"
    path.write_text("out_dir = 'out-shakespeare-char'\nbatch_size = 64\nblock_size = 256\n")
    with pytest.raises(UserError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"config file {path} is Python, as nanoGPT's configs are; tinygpt's are YAML "
        f"(section: {{key: value}}): {SHIPPED_CONFIGS / 'shakespeare_char.yaml'} is nanoGPT's "
        "shakespeare_char recipe, and docs/usage.md's configuration reference lists every key"
    )


@pytest.mark.parametrize(
    "override, instead",
    [
        ("model.vocab_size=65", "the vocabulary is the corpus's own characters, counted when training"),
        ("meta_vocab_size=65", "the vocabulary is the corpus's own characters"),
        ("init_from=resume", "add --resume to continue one (nanoGPT's 'resume')"),
        ("eval_only=true", "run tinygpt evaluate CHECKPOINT"),
        ("always_save_checkpoint=false", "every evaluation saves last.pt"),
        ("backend=gloo", "the device chooses (nccl on CUDA, gloo on a CPU)"),
    ],
)
def test_nanogpt_settings_without_a_key_say_what_does_their_work(tmp_path, override, instead):
    """Not a suggested key (vocab_size once got 'did you mean model.block_size?'): what to do instead."""
    path = write(tmp_path, "model: {n_layer: 2}\n")
    with pytest.raises(UserError) as caught:
        load_config(path, [override])
    key = override.partition("=")[0]
    assert str(caught.value).startswith(f"--set {override}: unknown key '{key}'; ")
    assert instead in str(caught.value) and "did you mean" not in str(caught.value)


def test_nanogpt_names_in_a_file_suggest_the_key_too(tmp_path):
    with pytest.raises(UserError, match=r"unknown key 'max_iters'; did you mean 'train.max_iters'\?$"):
        load_config(write(tmp_path, "max_iters: 20\n"))


def test_a_list_refused_shows_how_a_list_is_written_and_that_spelling_works(tmp_path):
    path = write(tmp_path, "model: {n_layer: 2}\n")
    with pytest.raises(UserError) as caught:
        load_config(path, ["train.betas=0.9,0.95"])
    assert str(caught.value).endswith(
        "train.betas must be a list of two numbers in [0, 1), written as a list: [0.9, 0.95] in YAML, "
        "--set 'train.betas=[0.9, 0.95]'"
    )
    assert load_config(path, ["train.betas=[0.9, 0.95]"]).train.betas == [0.9, 0.95]  # as it says
