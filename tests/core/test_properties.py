"""Property-based tests: the tokenizer on any text, the config loader on any YAML.

The config loader must answer every input with either a valid RunConfig or a
UserError: never a traceback, never a config that breaks its own rules.
"""

import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinygpt.config.run_config import SECTIONS, RunConfig, from_dict, load_config
from tinygpt.data.corpus import encode_corpus
from tinygpt.errors import UserError
from tinygpt.tokenizer import CharTokenizer

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# ------------------------------------------------------------------ tokenizer


@FAST
@given(st.text(min_size=1))
def test_any_text_round_trips_through_its_own_vocabulary(text):
    tok = CharTokenizer.from_text(text)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.chars == sorted(set(text)) and all(0 <= i < tok.vocab_size for i in ids)
    fast_tok, fast_ids = encode_corpus(text)  # the corpus encoder (torch) agrees with the tokenizer
    assert fast_tok.chars == tok.chars and fast_ids.tolist() == ids


@FAST
@given(known=st.text(min_size=1), text=st.text())
def test_unknown_characters_are_refused_and_listed_in_order(known, text):
    tok = CharTokenizer.from_text(known)
    missing = list(dict.fromkeys(c for c in text if c not in set(known)))
    assert tok.unknown(text) == missing
    if not missing:
        assert tok.decode(tok.encode(text)) == text
        return
    with pytest.raises(UserError) as e:
        tok.encode(text)
    message = str(e.value)
    assert message.startswith(f"{len(missing)} character(s) not in the model's vocabulary: ")
    assert ", ".join(repr(c) for c in missing[:20]) in message


# ------------------------------------------------------------------ config loader

KEYS = [f.name for cls in SECTIONS.values() for f in cls.__dataclass_fields__.values()]
NAMES = st.sampled_from([*SECTIONS, "out_dir", *KEYS]) | st.text(max_size=8)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**1023)  # past what a float can hold
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["cpu", "cuda", "auto", "float16", "shakespeare", "1e-3"])
)
# values as YAML text, where YAML's own readings (dates, octal, anchors, tags, nesting) come into play
RAW = (
    st.integers().map(str)
    | st.integers(min_value=10**300, max_value=10**400).map(str)
    | st.floats().map(repr)
    | st.text(max_size=10)
    | st.integers(0, 400).map(lambda n: "[" * n)
    | st.sampled_from(
        [
            "2001-02-30",
            "2001-02-03",
            "2001-13-01 12:00",
            "190:20:30",
            "0x1F",
            "0o17",
            "1_000",
            ".inf",
            "-.nan",
        ]
        + [
            "~",
            "yes",
            "off",
            "!!binary aGk=",
            "!!binary ?",
            "!!python/name:os.system",
            "!!float x",
            "*a",
            "&a 1",
        ]
        + ["[1, [2]]", "{a: 1}", "'quoted'", '"\\u00e9"', "1e400", "1.0e+400", "|\n  block", "- item"]
    )
)
LINES = st.lists(
    st.tuples(NAMES, RAW, st.sampled_from(["", "  "])).map(lambda kv: f"{kv[2]}{kv[0]}: {kv[1]}"),
    max_size=6,
).map("\n".join)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=5),
    max_leaves=12,
)


def check_valid(config: RunConfig) -> None:
    """The rules a config that loaded must keep."""
    m, d, t = config.model, config.data, config.train
    assert min(m.n_layer, m.n_head, m.n_embd, m.block_size) >= 1 and m.n_embd % m.n_head == 0
    assert 0 <= m.dropout < 1 and 0 < d.val_fraction < 1 and isinstance(m.bias, bool)
    assert 0 <= t.min_lr <= t.learning_rate and math.isfinite(t.learning_rate)
    assert len(t.betas) == 2 and all(0 <= b < 1 for b in t.betas)
    assert t.device in ("auto", "cpu", "cuda", "mps")
    assert t.dtype in ("auto", "float32", "bfloat16", "float16")
    assert from_dict(config.to_dict()) == config  # what it saves in config.yaml loads back the same


def load_text(tmp_path: Path, text: str, overrides: list[str] = ()) -> None:
    path = tmp_path / "random.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        config = load_config(path, overrides)
    except UserError as e:
        assert str(e) and "\n" not in str(e).strip()  # one line
        return
    check_valid(config)


@FAST
@given(document=DOCUMENTS)
def test_random_yaml_documents_load_or_give_a_clear_error(tmp_path, document):
    load_text(tmp_path, yaml.safe_dump(document))


@FAST
@given(
    model=st.fixed_dictionaries(
        {}, optional={k: SCALARS for k in ("n_layer", "n_head", "n_embd", "dropout")}
    ),
    train=st.fixed_dictionaries(
        {},
        optional={k: SCALARS | st.lists(SCALARS, max_size=3) for k in ("learning_rate", "min_lr", "betas")},
    ),
)
def test_random_values_for_real_keys_load_or_give_a_clear_error(tmp_path, model, train):
    load_text(tmp_path, yaml.safe_dump({"model": model, "train": train}))


@FAST
@given(text=LINES | st.text(max_size=60), overrides=st.lists(st.tuples(NAMES, RAW), max_size=2))
def test_random_text_and_overrides_load_or_give_a_clear_error(tmp_path, text, overrides):
    load_text(tmp_path, text, [f"{section}.{key}" for section, key in overrides])


# ------------------------------------------------------------------ sample's flags

ODD_NUMBERS = ["-1", "0", "1", "2", "1.5", "1e3", "nan", "inf", "-inf", "x", "", "18446744073709551616"]
SAMPLE_FLAGS = {
    "--prompt": st.text(max_size=20),
    "--max-new-tokens": st.sampled_from(["-1", "0", "1", "3", "1.5", "x", "", "nan"]),
    "--temperature": st.sampled_from([*ODD_NUMBERS, "1e-40", "1e-300", "1e308"]) | st.floats().map(str),
    "--top-k": st.sampled_from([*ODD_NUMBERS, "1000"]),
    "--top-p": st.sampled_from([*ODD_NUMBERS, "0.5", "1e-320", "1.0000001"]) | st.floats().map(str),
    "--num-samples": st.sampled_from(["-1", "0", "1", "2", "x"]),
    "--seed": st.sampled_from([*ODD_NUMBERS, "4294967295", "4294967296"]),
    "--device": st.sampled_from(["cpu", "auto", "cuda", "tpu"]),
    "--ablate": st.sampled_from(["0.0", "1.1", "0.0,1.1", "9.9", "0.x", "", "-1.0", "0.0,0.0"]),
    "--ablate-mode": st.sampled_from(["zero", "mean", "half"]),
    "--no-cache": st.none(),
}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flags=st.fixed_dictionaries({}, optional=SAMPLE_FLAGS), missing=st.booleans())
def test_random_sample_flags_sample_or_give_a_clear_error(odd_checkpoint, tmp_path, capsys, flags, missing):
    """Every combination ends in samples (exit 0) or one error line (exit 2): never a traceback."""
    from tinygpt.app.cli import main

    checkpoint = str(tmp_path / "none.pt") if missing else str(odd_checkpoint)
    argv = ["sample", "--checkpoint", checkpoint]
    for flag, value in flags.items():
        argv += [flag] if value is None else [f"{flag}={value}"]  # = keeps a value like -1 a value
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: a value of the wrong type, or an unknown choice
        code = e.code
    err = capsys.readouterr().err
    assert code in (0, 2), err
    if code == 2:
        assert "error: " in err and "Traceback" not in err
