"""docs/tutorial.ipynb, run top to bottom by a real Jupyter kernel on a tiny config, with no error."""

import json
from pathlib import Path

import pytest
import yaml
from conftest import need_extra, tiny_raw

pytestmark = pytest.mark.slow  # a kernel, and a (tiny) training run

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.ipynb"
PROMPT = "KING:\nThe fo"  # characters the test corpus holds, within its block_size of 16


def test_the_committed_tutorial_carries_no_outputs():
    notebook = json.loads(TUTORIAL.read_text(encoding="utf-8"))
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert code and all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code)
    tagged = [cell for cell in code if "parameters" in cell["metadata"].get("tags", [])]
    assert len(tagged) == 1, "one cell holds the knobs, which this test rewrites"


def test_the_tutorial_runs_top_to_bottom_in_a_fresh_kernel(corpus_file, tmp_path):
    need_extra("nbclient", "test")
    import nbformat
    from nbclient import NotebookClient

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_raw(corpus_file, tmp_path / "unused")), encoding="utf-8")
    notebook = nbformat.read(TUTORIAL, as_version=4)
    (knobs,) = [cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", [])]
    knobs.source = (
        f"CONFIG = {str(config)!r}\nRUN = 'run'\n"
        "SETTINGS = {'train': {'max_iters': 20, 'eval_interval': 10}}\n"
        f"PROMPT = {PROMPT!r}"
    )
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    html = [out.data["text/html"] for out in outputs if "text/html" in out.get("data", {})]
    assert sum("<iframe" in h for h in html) == 4  # the walkthrough, the heatmaps, the lens, the timeline
    assert sum('class="tinygpt-heads"' in h for h in html) == 1
    assert (tmp_path / "run" / "best.pt").is_file() and (tmp_path / "run" / "timeline.jsonl").is_file()
    printed = "".join(out.get("text", "") for out in outputs if out.output_type == "stream")
    assert "validation loss" in printed and PROMPT in printed
