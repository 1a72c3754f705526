"""Export to Hugging Face transformers and to bare safetensors: the export computes what tinygpt does."""

import json
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from conftest import broken_link, files_cut_at

from tinygpt import GPT, GPTConfig, load_checkpoint
from tinygpt.app.cli import main
from tinygpt.app.export import export, load_safetensors
from tinygpt.errors import UserError
from tinygpt.files.checkpoint import FORMAT_VERSION, write_payload
from tinygpt.generation.sampling import generate

CHARS = sorted(set("\n\t !',.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyzéà—’🙂"))
TEXT = "KING:\nWhat  say'st thou, fool?\té — 🙂 ’tis\n\n"


def write_checkpoint(path, bias: bool = True, mlp: bool = True, **extra_config) -> GPT:
    """A small model with every weight random (biases and norm gains too), saved as training saves it."""
    torch.manual_seed(0)
    sizes = dict(vocab_size=len(CHARS), block_size=32, n_layer=2, n_head=2, n_embd=16)
    config = GPTConfig(**sizes, bias=bias, mlp=mlp)
    model = GPT(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    write_payload(
        {
            "format_version": FORMAT_VERSION,
            "model_config": {**vars(model.config), **extra_config},
            "model": model.state_dict(),
            "tokenizer": CHARS,
            "record": {"step": 7, "val_loss": 1.5},
        },
        path,
    )
    return model.eval()


@pytest.mark.parametrize("bias, mlp", [(True, True), (False, True), (True, False)])
def test_transformers_loads_the_hf_export_with_the_same_logits_and_generation(tmp_path, bias, mlp):
    """An attention-only model (mlp=False) exports with all-zero MLPs, which add exactly nothing."""
    transformers = pytest.importorskip("transformers")
    model = write_checkpoint(tmp_path / "best.pt", bias=bias, mlp=mlp)
    export(tmp_path / "best.pt", tmp_path / "hf", "hf")
    files = {p.name for p in (tmp_path / "hf").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".partial"))]  # weights as safetensors only

    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()  # tied, as in tinygpt
    idx = torch.tensor([list(range(len(CHARS)))[:32], list(range(len(CHARS)))[-32:]])  # (2, 32)
    with torch.no_grad():
        ours, _ = model(idx)
        theirs = hf(idx).logits
    assert ours.abs().max() > 1.0  # logits large enough for a wrong mapping to show
    assert (ours - theirs).abs().max() <= 1e-5
    if not bias:
        assert not hf.transformer.h[0].attn.c_attn.bias.any() and not hf.transformer.ln_f.bias.any()
    if not mlp:
        assert not any(p.any() for p in hf.transformer.h[1].mlp.parameters())

    with torch.no_grad():  # transformers shifts the labels itself: the same next-character loss
        hf_loss = hf(idx, labels=idx).loss
        _, loss = model(idx[:, :-1], idx[:, 1:])
    assert hf_loss.item() == pytest.approx(loss.item(), rel=1e-6)

    prompt = idx[:, :4]
    greedy = hf.generate(prompt, max_new_tokens=28, do_sample=False)
    assert torch.equal(greedy, generate(model, prompt, 28, temperature=0))


def test_the_hf_config_keeps_dropout_off_the_attention_weights_where_the_model_did(tmp_path):
    pytest.importorskip("transformers")
    write_checkpoint(tmp_path / "best.pt", dropout=0.1, attention_dropout=False)
    export(tmp_path / "best.pt", tmp_path / "hf", "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["attn_pdrop"], config["resid_pdrop"], config["embd_pdrop"]) == (0.0, 0.1, 0.1)


def test_the_exported_tokenizer_round_trips_every_character(tmp_path):
    transformers = pytest.importorskip("transformers")
    write_checkpoint(tmp_path / "best.pt")
    export(tmp_path / "best.pt", tmp_path / "hf")
    _, ours, _ = load_checkpoint(tmp_path / "best.pt")
    for tokenizer in (
        transformers.AutoTokenizer.from_pretrained(tmp_path / "hf"),
        transformers.PreTrainedTokenizerFast.from_pretrained(tmp_path / "hf"),
    ):
        ids = tokenizer.encode(TEXT)
        assert ids == ours.encode(TEXT)  # one id per character, tinygpt's ids, no special tokens
        assert tokenizer.decode(ids) == TEXT  # newlines, tabs, runs of spaces and emoji come back
        assert tokenizer.decode(tokenizer(" , . ?").input_ids) == " , . ?"  # no clean-up of spaces
        with pytest.raises(Exception, match="(?i)unk"):  # a character outside the vocabulary
            tokenizer.encode("ü")


def test_safetensors_export_holds_weights_config_and_vocabulary(tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.torch import load_file

    model = write_checkpoint(tmp_path / "best.pt", bias=False)
    assert main(["export", str(tmp_path / "best.pt"), "--format", "safetensors", str(tmp_path / "st")]) == 0
    config = json.loads((tmp_path / "st" / "config.json").read_text(encoding="utf-8"))
    assert config["vocabulary"] == CHARS and config["model_config"] == vars(model.config)
    tensors = load_file(tmp_path / "st" / "model.safetensors")
    assert set(tensors) == set(model.state_dict()) - {"lm_head.weight"}  # the tied head is wte

    loaded, tokenizer = load_safetensors(tmp_path / "st")
    idx = torch.tensor([tokenizer.encode(TEXT)[:32]])
    assert torch.equal(loaded(idx)[0], model(idx)[0])
    assert tokenizer.chars == CHARS


@pytest.mark.parametrize("fmt", ["hf", "safetensors"])
def test_every_exported_file_is_mode_0644(tmp_path, fmt):
    pytest.importorskip("transformers" if fmt == "hf" else "safetensors")
    write_checkpoint(tmp_path / "best.pt")
    export(tmp_path / "best.pt", tmp_path / "out", fmt)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").iterdir()}
    assert "model.safetensors" in modes  # written by safetensors itself, through a 0600 temporary file
    assert modes == dict.fromkeys(modes, 0o644)


def test_export_refuses_what_it_cannot_write_exactly_and_never_overwrites(tmp_path):
    write_checkpoint(tmp_path / "rope.pt", rotary=True)
    with pytest.raises(UserError, match="option\\(s\\) rotary.*cannot reproduce"):
        export(tmp_path / "rope.pt", tmp_path / "out", "safetensors")
    write_checkpoint(tmp_path / "best.pt")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty"):
        export(tmp_path / "best.pt", tmp_path / "taken", "safetensors")
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]
    with pytest.raises(UserError, match="unknown export format 'onnx'"):
        export(tmp_path / "best.pt", tmp_path / "out", "onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "rope.pt", "taken"]  # no leftovers


@pytest.mark.parametrize(
    "target", ["nothing", "loop", "empty-directory"], ids=["nothing", "loop", "empty-directory"]
)
def test_an_export_into_a_symbolic_link_says_what_the_link_is(tmp_path, capsys, target):
    """The rename into place failed with 'Not a directory', and the advice was to free some space."""
    write_checkpoint(tmp_path / "best.pt")
    link = broken_link(tmp_path / "exported", loop=target == "loop")
    if target == "empty-directory":
        (tmp_path / "other-exported").mkdir()  # what the link points to
    assert main(["export", str(tmp_path / "best.pt"), "--format", "safetensors", str(link)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    if target == "empty-directory":
        assert line == (
            f"error: {link} is a symbolic link; an export is written beside its directory and renamed "
            "into place, which a link cannot take: export into a new directory inside it, "
            f"e.g. {link / 'model'}"
        )
        assert not any((tmp_path / "other-exported").iterdir())
    else:
        nothing = "a symbolic link to nothing (or a loop of links)"
        assert line == f"error: {link} is {nothing}; export into a new directory"
    assert link.is_symlink() and not list(tmp_path.glob(".*partial"))


def test_a_missing_extra_is_a_user_error(tmp_path, monkeypatch, capsys):
    write_checkpoint(tmp_path / "best.pt")
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    assert main(["export", str(tmp_path / "best.pt"), str(tmp_path / "hf")]) == 2
    assert "pip install 'tinygpt[hf]'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]  # no partial directory left


def test_safetensors_without_numpy_is_a_user_error(tmp_path, monkeypatch, capsys):
    pytest.importorskip("safetensors")
    write_checkpoint(tmp_path / "best.pt")
    monkeypatch.setitem(sys.modules, "numpy", None)  # safetensors' writer imports it when it writes
    assert main(["export", str(tmp_path / "best.pt"), str(tmp_path / "st"), "--format", "safetensors"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs the Python package numpy" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]


def test_the_model_card_names_the_out_of_vocabulary_error_and_its_helper_avoids_it(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    write_checkpoint(tmp_path / "best.pt")
    export(tmp_path / "best.pt", tmp_path / "hf")
    card = (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    with pytest.raises(Exception) as raised:
        tokenizer("ROMEO: über")  # ü is not in the vocabulary
    assert f'"{raised.value}"' in card  # the card's heading is the very message transformers gives

    example = card.split("```python\n")[1].split("```")[0]
    example = example.replace("path/to/this/directory", str(tmp_path / "hf")).replace("ROMEO:", "ROMEO: über")
    exec(example, {})  # the card's example, as a user runs it, with a character the model lacks
    printed = capsys.readouterr().out
    assert printed.startswith("dropped 1 character(s) outside the vocabulary: ['ü']\nROMEO: ber")


@pytest.mark.parametrize("fmt", ["hf", "safetensors"], ids=["hf", "safetensors"])
def test_an_export_onto_a_full_disk_is_one_error_and_leaves_nothing(tmp_path, fmt, capsys):
    pytest.importorskip("transformers" if fmt == "hf" else "safetensors")
    write_checkpoint(tmp_path / "best.pt")
    with files_cut_at(4096):  # the weights are larger: their write fails part-way, in safetensors' Rust
        code = main(["export", str(tmp_path / "best.pt"), str(tmp_path / "out"), "--format", fmt])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        f"error: cannot write the export to {tmp_path / 'out'}: File too large; nothing was written; "
        "free some space (or fix the directory) and export again\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]  # no partial directory or file


@contextmanager
def mounted(path, *options: str) -> Iterator[None]:
    """A fresh tmpfs mounted on path for the test (mount(8): root, in a namespace that allows it)."""
    path.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", *options, "none", str(path)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip() or 'not root'}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


@pytest.mark.skipif(shutil.which("mount") is None, reason="no mount(8)")
def test_an_export_onto_a_mount_point_says_to_export_inside_it(tmp_path, capsys):
    """An empty mount point is an empty directory, which export takes, but the rename into place fails
    there (EBUSY): once said as a full disk; a read-only one gets other advice again."""
    write_checkpoint(tmp_path / "best.pt")
    writable, read_only = tmp_path / "disk", tmp_path / "ro"
    with mounted(writable), mounted(read_only, "-o", "ro"):
        assert main(["export", str(tmp_path / "best.pt"), str(writable), "--format", "safetensors"]) == 2
        assert capsys.readouterr().err == (
            f"error: {writable} is a mount point; an export is written beside its directory and renamed "
            "into place, which a mount point cannot be: export into a new directory inside it, e.g. "
            f"{writable / 'model'}\n"
        )
        assert (
            main(["export", str(tmp_path / "best.pt"), str(writable / "model"), "--format", "safetensors"])
            == 0
        )
        assert main(["export", str(tmp_path / "best.pt"), str(read_only), "--format", "safetensors"]) == 2
        assert "a mount point of a read-only file system" in capsys.readouterr().err
        assert (
            main(["export", str(tmp_path / "best.pt"), str(read_only / "x"), "--format", "safetensors"]) == 2
        )
        err = capsys.readouterr().err
        no_space = f"error: cannot create {read_only / 'x'}: Read-only file system; "
        assert err == no_space + "export onto a writable file system\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "disk", "ro"]  # nothing beside
