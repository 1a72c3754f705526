from pathlib import Path

from tinygpt.config.run_config import reference

USAGE = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text()  # the configuration reference


def test_readme_config_reference_is_current():
    assert reference() in USAGE
