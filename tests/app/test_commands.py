"""One command line: scripts/X.py, `tinygpt X` and `python -m tinygpt X` are the same command."""

import argparse
import runpy
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tinygpt.app.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]

# (script in scripts/, tinygpt subcommand): every command has both; add a pair with each new command
COMMANDS = [
    ("train.py", "train"),
    ("sample.py", "sample"),
    ("inspect_checkpoint.py", "inspect"),
    ("explain.py", "explain"),
    ("features.py", "features"),
    ("export.py", "export"),
    ("evaluate.py", "evaluate"),
    ("bench.py", "bench"),
]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def exit_output(run, capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        run()
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_every_command_has_a_script_and_every_script_a_command():
    assert {command for _, command in COMMANDS} == set(subcommands())
    scripts = {p.name for p in (ROOT / "scripts").glob("*.py")}
    assert {script for script, _ in COMMANDS} <= scripts


@pytest.mark.parametrize("script, command", COMMANDS)
def test_a_script_takes_exactly_the_options_of_its_command(script, command, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script adds src/ to it
    from_script = exit_output(
        lambda: runpy.run_path(str(ROOT / "scripts" / script), run_name="__main__"), capsys
    )
    from_command = exit_output(lambda: main([command, "--help"]), capsys)
    assert from_script == from_command
    assert from_command.startswith(f"usage: tinygpt {command}")


@pytest.mark.parametrize("command", [command for _, command in COMMANDS])
def test_help_lists_every_option_and_an_example(command, capsys):
    parser = subcommands()[command]
    text = exit_output(lambda: main([command, "--help"]), capsys)
    for action in parser._actions:
        for name in action.option_strings or [action.metavar or action.dest]:
            assert name in text, f"tinygpt {command} --help does not list {name}"
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            assert action.help, f"tinygpt {command}: {action.option_strings[0]} has no help text"
    assert "example:" in text or "examples:" in text


@pytest.mark.slow
def test_the_console_script_and_python_m_run_the_same_command():
    (script,) = entry_points(group="console_scripts", name="tinygpt")
    assert script.value == "tinygpt.app.cli:main"
    executable = Path(sys.executable).parent / "tinygpt"
    runs = [[str(executable), "export", "--help"], [sys.executable, "-m", "tinygpt", "export", "--help"]]
    outputs = [subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT) for cmd in runs]
    assert [o.returncode for o in outputs] == [0, 0], [o.stderr for o in outputs]
    assert outputs[0].stdout == outputs[1].stdout and "--format" in outputs[0].stdout
