"""Options shared by the commands, run in-process through tinygpt.app.cli.main: --prompt-file, --version,
and checks that come before any output."""

import importlib.metadata
import re

import pytest
from conftest import UNOPENABLE, unopenable_path

from tinygpt.app.cli import main


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_inspect_checks_layer_and_head_before_printing_anything(odd_checkpoint, capsys):
    assert main(["inspect", str(odd_checkpoint), "--prompt", "KING:", "--head", "9"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert one_error_line(err) == "error: head 9 does not exist: this model has 2 heads (0 … 1)"
    assert main(["inspect", str(odd_checkpoint), "--prompt", "KING:", "--layer", "1", "--head", "1"]) == 0
    assert "layer 1 head 1" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command",
    [
        ["sample", "--temperature", "0", "--max-new-tokens", "12", "--device", "cpu"],
        ["inspect", "--layer", "0", "--head", "1"],
        ["explain", "--layer", "1", "--head", "0"],
    ],
    ids=["sample", "inspect", "explain"],
)
def test_a_prompt_file_gives_the_same_output_as_the_same_prompt_typed(
    odd_checkpoint, tmp_path, capsys, command
):
    prompt = "FOOL:\nTom 😀"  # a newline and a character outside ASCII, which a shell makes awkward
    path = tmp_path / "prompt.txt"
    path.write_bytes(b"\xef\xbb\xbf" + prompt.replace("\n", "\r\n").encode("utf-8"))  # a BOM, Windows lines
    checkpoint = ["--checkpoint", str(odd_checkpoint)] if command[0] == "sample" else [str(odd_checkpoint)]
    assert main([*command, *checkpoint, "--prompt", prompt]) == 0
    typed = capsys.readouterr().out
    assert main([*command, *checkpoint, "--prompt-file", str(path)]) == 0
    assert capsys.readouterr().out == typed
    assert "😀" in typed  # the prompt made it through


def test_prompt_file_errors_are_one_line(odd_checkpoint, tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("FOOL: caf\xe9".encode("latin-1"))
    cases = {
        str(
            tmp_path / "nowhere.txt"
        ): f"--prompt-file {tmp_path / 'nowhere.txt'} does not exist; pass a UTF-8 "
        "text file holding the prompt",
        str(tmp_path): f"--prompt-file {tmp_path} is a directory; pass a text file holding the prompt",
        str(bad): f"--prompt-file {bad} is not UTF-8 text (bad byte at offset 9); convert it to UTF-8",
    }
    for path, message in cases.items():
        assert main(["explain", str(odd_checkpoint), "--prompt-file", path]) == 2
        out, err = capsys.readouterr()
        assert out == "" and one_error_line(err) == f"error: {message}"


@pytest.mark.parametrize("kind", UNOPENABLE, ids=UNOPENABLE)
def test_a_prompt_file_path_the_system_cannot_open_is_one_line(odd_checkpoint, tmp_path, capsys, kind):
    """A loop of links, a path through a file, a name too long: each once ended in an OSError's traceback."""
    path, reason = unopenable_path(tmp_path, kind, ".txt")
    assert main(["explain", str(odd_checkpoint), "--prompt-file", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and one_error_line(err) == (
        f"error: --prompt-file {path} cannot be read ({reason}); pass a UTF-8 text file holding the prompt"
    )


@pytest.mark.parametrize(
    "command",
    [
        ["sample", "--checkpoint", "{long}"],
        ["inspect", "{long}", "--timeline"],
        ["evaluate", "{odd}", "--corpus", "{long}"],
        ["export", "{odd}", "--format", "safetensors", "{long}"],
        ["train", "--config", "tiny", "--set", "data.corpus={long}", "--set", "out_dir={tmp}/run"],
    ],
    ids=["checkpoint", "run-directory", "evaluate-corpus", "export-out-dir", "corpus"],
)
def test_a_path_with_a_name_too_long_for_the_file_system_is_one_line(
    odd_checkpoint, tmp_path, capsys, command
):
    """Each once ended in OSError's traceback: [Errno 36] File name too long."""
    long = tmp_path / ("n" * 300)
    args = [a.format(long=long, odd=odd_checkpoint, tmp=tmp_path) for a in command]
    assert main(args) == 2
    out, err = capsys.readouterr()
    line = one_error_line(err)
    assert re.fullmatch(
        rf"error: {re.escape(str(tmp_path))}/n{{300}}(/best\.pt)? cannot be used: a name in it is longer "
        r"than the file system allows \(File name too long\); "
        r"give a path whose every name is at most 255 bytes",
        line,
    ), line
    assert not (tmp_path / "run").exists()


def test_prompt_and_prompt_file_together_are_refused(odd_checkpoint, tmp_path, capsys):
    path = tmp_path / "p.txt"
    path.write_text("KING:")
    with pytest.raises(SystemExit) as exited:
        main(["inspect", str(odd_checkpoint), "--prompt", "KING:", "--prompt-file", str(path)])
    assert exited.value.code == 2
    err = capsys.readouterr().err  # one line, as every mistake (not argparse's usage text)
    assert err == "error: --prompt-file and --prompt cannot be given together; give one of them\n"


def test_version_comes_from_the_package_metadata(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"tinygpt {importlib.metadata.version('tinygpt')}\n"


@pytest.mark.parametrize("command", ["train", "bench"])
def test_config_help_names_the_shipped_configs(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert (
        "a YAML config file, or a shipped config by name: "
        "cpu, cpu_large, cpu_large_float32, cpu_long, cpu_quick, induction, induction_attention_only, "
        "shakespeare_char, tiny" in help_text
    )


NANOGPT_HABITS = {
    "key-as-option": (
        ["--max_iters=20"],
        "--max_iters=20; config keys are set with --set, e.g. --set train.max_iters=20",
    ),
    "value-after-it": (
        ["--n_layer", "3"],
        "--n_layer; config keys are set with --set, e.g. --set model.n_layer=3",
    ),
    "top-level-key": (  # out_dir stands in no section (key_for): once no suggestion at all
        ["--out_dir=runs/a"],
        "--out_dir=runs/a; config keys are set with --set, e.g. --set out_dir=runs/a",
    ),
    "flag-alone": (["--compile"], "--compile; config keys are set with --set, e.g. --set train.compile=true"),
    "alias": (
        ["--lr=1e-3"],
        "--lr=1e-3; config keys are set with --set, e.g. --set train.learning_rate=1e-3",
    ),
    "list": (
        ["--beta2=0.95"],
        "--beta2=0.95; config keys are set with --set, e.g. "
        "--set 'train.betas=[0.9, 0.95]' (a list: [beta1, beta2])",
    ),
}


@pytest.mark.parametrize("args, said", NANOGPT_HABITS.values(), ids=list(NANOGPT_HABITS))
def test_a_config_key_typed_as_an_option_is_shown_as_its_set(capsys, args, said):
    """nanoGPT's train.py takes `--max_iters=20` and `--compile`; tinygpt shows the --set that means it."""
    with pytest.raises(SystemExit) as exited:
        main(["train", "--config", "cpu_quick", *args])
    assert exited.value.code == 2
    assert one_error_line(capsys.readouterr().err) == f"error: tinygpt train has no option {said}"


def test_an_option_that_is_no_config_key_still_gets_the_nearest_option(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--config", "cpu_quick", "--quite"])
    assert one_error_line(capsys.readouterr().err) == (
        "error: tinygpt train has no option --quite; did you mean --quiet? tinygpt train --help lists them"
    )
