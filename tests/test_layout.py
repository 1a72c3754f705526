"""The house's rules, checked: imports run one way, and the model's config has one source of truth."""

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from tinygpt.config import ModelSection
from tinygpt.model import GPTConfig

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tinygpt"


def imported(path: Path) -> set[str]:
    """Every tinygpt module a file imports, at its top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tinygpt"):
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)  # from tinygpt import memory
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("tinygpt"))
    return names


def room(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else "core"


def test_imports_run_one_way_core_below_explain_and_training():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if room(path) == "app" or path.stem == "__main__":
            continue
        for name in imported(path):
            into = name.split(".")[1] if name.count(".") else "core"
            if room(path) == "core" and into in ("training", "explain", "app"):
                wrong.append(f"{path.relative_to(PACKAGE)} imports {name}")
            if room(path) in ("explain", "training") and into == "app":
                wrong.append(f"{path.relative_to(PACKAGE)} imports {name}")
            if room(path) == "explain" and into == "training":
                wrong.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_sampling_and_looking_inside_load_no_training_module():
    """In a fresh interpreter: generation and every inspect/explain entry point, and nothing of training."""
    code = (
        "import sys\n"
        "import tinygpt.app.sample, tinygpt.generate, tinygpt.explain.inspect, tinygpt.explain.walkthrough\n"
        "import tinygpt.explain.page, tinygpt.explain.heatmap, tinygpt.app.export, tinygpt.app.evaluate\n"
        "print(sorted(m for m in sys.modules if m.startswith('tinygpt')))\n"
        "print(sorted(m for m in sys.modules if m.startswith('tinygpt.training')))\n"
    )
    run = [sys.executable, "-c", code]
    out = subprocess.run(run, capture_output=True, text=True, timeout=300, check=True)
    loaded, forbidden = out.stdout.splitlines()
    assert "tinygpt.explain.page" in loaded and "tinygpt.generate" in loaded  # the imports did run
    assert forbidden == "[]"  # no loop, no lock, no process group


def test_the_model_config_and_the_run_configs_model_section_have_the_same_fields():
    shape = {f.name for f in dataclasses.fields(GPTConfig)}
    section = {f.name for f in dataclasses.fields(ModelSection)}
    assert shape == section | {"vocab_size"}  # the vocabulary comes from the corpus, not the config
    defaults = {f.name: f.default for f in dataclasses.fields(GPTConfig) if f.name in section}
    assert all(d is not dataclasses.MISSING for n, d in defaults.items() if n in ("dropout", "bias"))
