"""The house's rules, checked: imports run one way, and the model's config has one source of truth."""

import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tinygpt
from tinygpt.config.run_config import ModelSection
from tinygpt.model import GPTConfig

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "tinygpt"
# the floors, top down: a module imports only from its own room or a room on a lower floor, and the
# two rooms of one floor (training, explain) not from each other
FLOOR = {"scripts": 3, "app": 2, "training": 1, "explain": 1, "core": 0}
# the core's rooms by purpose: one floor, importing each other freely (but never in a circle)
CORE_ROOMS = {"generation", "data", "config", "files"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(path: Path) -> set[str]:
    """Every tinygpt module a file imports, at its top, inside a function or under TYPE_CHECKING."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tinygpt"):
            for alias in node.names:  # `from tinygpt.app import cli` imports the module tinygpt.app.cli
                submodule = f"{node.module}.{alias.name}"
                names.add(submodule if submodule in MODULES else node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("tinygpt"))
    if path == PACKAGE / "__init__.py":  # the front door imports what it names on first use
        names.update(f"tinygpt.{module}" for module in tinygpt.LAZY.values())
    return names


def room(module: str) -> str:
    """scripts for the package's front doors (python -m tinygpt, and `import tinygpt`, whose names are
    the Python API of app/), else the folder under tinygpt/."""
    parts = module.split(".")
    if parts[-1] == "__main__" or module == "tinygpt":
        return "scripts"
    if len(parts) > 1 and parts[1] in CORE_ROOMS:
        return "core"
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in FLOOR) else "core"


def wrong_way(source_room: str, target_room: str) -> bool:
    if source_room == target_room:
        return False
    return FLOOR[target_room] >= FLOOR[source_room]


def test_imports_run_down_only_scripts_app_training_and_explain_core():
    wrong = []
    for module, path in MODULES.items():
        for name in imported(path):
            if wrong_way(room(module), room(name)):
                wrong.append(f"{module} ({room(module)}) imports {name} ({room(name)})")
    for script in sorted((ROOT / "scripts").glob("*.py")):
        for name in imported(script):
            if wrong_way("scripts", room(name)):
                wrong.append(f"scripts/{script.name} imports {name}")
    assert not wrong, "\n".join(wrong)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), and modules that import themselves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_circle_lazy_imports_included():
    graph = {module: imported(path) & set(MODULES) for module, path in MODULES.items()}
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle_through_three_modules():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.slow
def test_sampling_and_looking_inside_load_no_training_module():
    """In a fresh interpreter: generation and every inspect/explain entry point, and nothing of training."""
    code = (
        "import sys\n"
        "import tinygpt.app.sample, tinygpt.generation.sampling, tinygpt.explain.report\n"
        "import tinygpt.explain.walkthrough\n"
        "import tinygpt.explain.page, tinygpt.explain.heatmap, tinygpt.app.export, tinygpt.app.evaluate\n"
        "print(sorted(m for m in sys.modules if m.startswith('tinygpt')))\n"
        "print(sorted(m for m in sys.modules if m.startswith('tinygpt.training')))\n"
    )
    run = [sys.executable, "-c", code]
    out = subprocess.run(run, capture_output=True, text=True, timeout=300, check=True)
    loaded, forbidden = out.stdout.splitlines()
    assert "tinygpt.explain.page" in loaded and "tinygpt.generation.sampling" in loaded  # the imports did run
    assert forbidden == "[]"  # no loop, no lock, no process group


def test_the_model_config_and_the_run_configs_model_section_have_the_same_fields():
    shape = {f.name for f in dataclasses.fields(GPTConfig)}
    section = {f.name for f in dataclasses.fields(ModelSection)}
    assert shape == section | {"vocab_size"}  # the vocabulary comes from the corpus, not the config
    defaults = {f.name: f.default for f in dataclasses.fields(GPTConfig) if f.name in section}
    assert all(d is not dataclasses.MISSING for n, d in defaults.items() if n in ("dropout", "bias"))


def test_the_front_door_names_the_api_and_imports_it_lazily():
    """`import tinygpt` loads no torch (the command line starts fast); each name in __all__ resolves."""
    code = "import sys, tinygpt; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "False"
    assert all(getattr(tinygpt, name) is not None for name in tinygpt.__all__)
    assert room("tinygpt") == "scripts" and "tinygpt.app.api" in imported(PACKAGE / "__init__.py")


@pytest.mark.parametrize("room_name", ["app", "explain", "training", *sorted(CORE_ROOMS)])
def test_each_rooms_index_names_every_module_in_it(room_name):
    """A room's __init__.py says what each of its modules is: one line per module, none left out."""
    init = PACKAGE / room_name / "__init__.py"
    index = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
    listed = set(re.findall(r"^(\w+\.py)\s", index, flags=re.M))
    assert listed == {p.name for p in init.parent.glob("*.py")} - {"__init__.py"}


MAX_FUNCTION_LINES = 60


def test_no_function_is_over_60_lines():
    """A function fits on a screen (the count includes its docstring). A module has no limit: it is as long
    as its one idea needs, never split because it reached a count."""
    too_long = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}: {node.name} is {lines} lines")
    assert not too_long, "\n".join(too_long)
