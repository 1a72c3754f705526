from pathlib import Path

from tinygpt.config import reference

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_config_reference_is_current():
    assert reference() in README
