"""What a wheel carries: built from a copy of the checkout, offline, opened, and installed elsewhere.

The build uses the environment's setuptools (no build isolation, so no package index is needed);
.ci/run installs one that builds wheels by itself (setuptools 70.1 on).
"""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_lists_every_package_under_src_and_the_top_level_configs():
    """The package list is written out (the configs' mapping needs it): a new room must be added to it."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    under_src = {
        ".".join(p.parent.relative_to(ROOT / "src").parts) for p in (ROOT / "src").rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == under_src | {"tinygpt.configs"}
    assert setuptools["package-dir"]["tinygpt.configs"] == "configs"


@pytest.mark.slow
def test_the_wheel_ships_the_top_level_configs_and_an_install_finds_them_from_anywhere(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / "configs", source / "configs")
    for name in ["pyproject.toml", "README.md"]:
        shutil.copy(ROOT / name, source / name)
    wheel_dir = tmp_path / "wheel"
    build = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(wheel_dir),
    ]
    subprocess.run([*build, "."], cwd=source, check=True, capture_output=True, timeout=300)
    (wheel,) = wheel_dir.glob("tinygpt-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"tinygpt/configs/{p.name}" for p in (ROOT / "configs").glob("*.yaml")}
    # cpu, cpu_large, cpu_large_float32, cpu_long, cpu_quick, induction, induction_attention_only,
    # shakespeare_char, tiny
    assert len(shipped) == 9 and shipped <= names
    modules = {f"tinygpt/explain/assets/{p.name}" for p in (ROOT / "src/tinygpt/explain/assets").glob("*.js")}
    assert {"tinygpt/explain/assets/explainer.html", "tinygpt/explain/assets/main.js"} | modules <= names
    assert {"tinygpt/app/cli.py", "tinygpt/training/loop.py"} <= names

    site = tmp_path / "site"  # installed, not editable: no checkout beside it
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = (
        "from tinygpt.config.run_config import config_path, load_config\n"
        "for given in ['cpu', 'cpu.yaml', 'configs/cpu.yaml']:\n"
        "    print(config_path(given), load_config(given).model.n_layer)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=elsewhere,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    found = out.stdout.splitlines()
    assert found == [f"{site / 'tinygpt' / 'configs' / 'cpu.yaml'} 4"] * 3
