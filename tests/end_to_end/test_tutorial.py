"""docs/tutorial.ipynb, run top to bottom by a real Jupyter kernel on a tiny config, with no error."""

import json
from pathlib import Path

import pytest
import yaml
from conftest import need_extra, tiny_raw

pytestmark = pytest.mark.slow  # a kernel, and a (tiny) training run

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.ipynb"
PROMPT = "KING:\nThe fo"  # characters the test corpus holds, within its block_size of 16


def test_the_committed_tutorial_carries_no_outputs():
    notebook = json.loads(TUTORIAL.read_text(encoding="utf-8"))
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert code and all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code)
    tagged = [cell for cell in code if "parameters" in cell["metadata"].get("tags", [])]
    assert len(tagged) == 1, "one cell holds the knobs, which this test rewrites"


def test_the_tutorial_runs_top_to_bottom_in_a_fresh_kernel(corpus_file, tmp_path):
    """Run from docs/ of a checkout (here a folder with a pyproject.toml), as `jupyter execute
    docs/tutorial.ipynb` runs it: it writes its run into the checkout's top level, nothing into docs/,
    and its training cell holds one bar, redrawn in place, not an output per redraw."""
    need_extra("nbclient", "test")
    import nbformat
    from nbclient import NotebookClient

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'a-checkout'\n", encoding="utf-8")
    docs = tmp_path / "docs"
    docs.mkdir()
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
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(docs)}}
    ).execute()
    assert list(docs.iterdir()) == []  # the run (and a built-in corpus) go to the top level, not docs/
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    html = [out.data["text/html"] for out in outputs if "text/html" in out.get("data", {})]
    assert sum("<iframe" in h for h in html) == 4  # the walkthrough, the heatmaps, the lens, the timeline
    assert sum('class="tinygpt-heads"' in h for h in html) == 1
    assert sum('class="tinygpt-neuron"' in h for h in html) == 1  # one neuron, its contexts marked
    assert sum('class="tinygpt-attribution"' in h for h in html) == 1  # the parts as bars
    patched = [h for h in html if 'class="tinygpt-patching"' in h]
    assert len(patched) == 1 and 'class="heads"' in patched[0] and 'class="streams"' in patched[0]
    assert sum('class="tinygpt-features"' in h for h in html) == 1  # the dictionary's features listed
    assert sum("of blocks.1.mlp_out: fires on" in h for h in html) == 1  # and its best one in detail
    assert (tmp_path / "run" / "features" / "mlp_out.1.pt").is_file()
    assert (tmp_path / "run" / "best.pt").is_file() and (tmp_path / "run" / "timeline.jsonl").is_file()
    printed = "".join(out.get("text", "") for out in outputs if out.output_type == "stream")
    assert "validation loss" in printed and PROMPT in printed

    (training,) = [cell for cell in notebook.cells if "tinygpt.train(" in cell.source]
    bars = [out for out in training.outputs if "step/s" in str(out) or "it/s" in str(out)]
    assert len(bars) == 1 and bars[0].output_type == "display_data"  # updated in place by its display id
    assert "20/20" in bars[0].data["text/plain"]  # the bar as it ended
    assert not [out for out in training.outputs if "\r" in out.get("text", "")]  # no terminal redraws
    size = len(nbformat.writes(notebook).encode())
    assert size < 1_500_000, f"the executed tutorial is {size:,} bytes"
    timeline_data = sum(h.count("&quot;snapshots&quot;:") for h in html)
    assert timeline_data == 1  # the timeline's data only in the timeline's view
