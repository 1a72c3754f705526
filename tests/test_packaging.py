"""What a wheel carries: built from a copy of the checkout, offline, and opened."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_wheel_ships_the_configs_and_the_page_assets(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ["pyproject.toml", "README.md"]:
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            ".",
        ],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("tinygpt-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"tinygpt/configs/{p.name}" for p in (ROOT / "src" / "tinygpt" / "configs").glob("*.yaml")}
    assert len(shipped) == 4 and shipped <= names
    assert {"tinygpt/explain/assets/explainer.html", "tinygpt/explain/assets/explainer.js"} <= names
