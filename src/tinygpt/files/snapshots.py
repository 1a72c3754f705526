"""The timeline's file: one snapshot of the model per evaluation, beside metrics.jsonl.

Training appends one snapshot to `timeline.jsonl` in the run directory at every
evaluation (rank 0 only; `train.timeline: false` turns it off). Each line is one
JSON object:

    {"step": int, "train_loss": float, "val_loss": float,
     "repeat_loss": float | null,       the loss where the validation text repeats its own last 4
                                        characters from earlier in the window (explain.heads.repeating),
                                        on REPEAT_WINDOWS windows: what an induction head lowers
     "probe": str,                      the probe prompt (train.timeline_probe, or PROBE_LENGTH
                                        characters of the validation split from its first line start)
     "heads": [{"layer": int, "head": int, "scores": {role: float}, "label": str}, ...],
     "attention": attention[layer][head][i] = the i + 1 weights of probe position i (4 decimals),
     "top5": per probe position, a list of 5 [char, probability] pairs, likeliest first,
     "sample": str}                     SAMPLE_LENGTH characters sampled after a newline (or the
                                        probe's first character), temperature 0.8, seed SAMPLE_SEED

The head scores are tinygpt.explain.heads' roles, scored cheaply: on SCORED_WINDOWS
evenly spaced validation windows and SCORED_PROBES induction probes, fixed ones (those
constants, REPEAT_WINDOWS, SAMPLE_LENGTH and SAMPLE_SEED, are tinygpt.explain.timeline's). The
file is appended, read and rewound exactly as metrics.jsonl is (tinygpt.files.metrics): one
write per line, a torn last line dropped with a note, and on --resume cut back to the
step of last.pt, so that no evaluation is there twice or missing.

The snapshots are taken by tinygpt.explain.timeline's recorder, which training is handed as
one of its evaluation's listeners; this module is the format they share with the run directory.
"""

from pathlib import Path
from typing import Any

import torch

from tinygpt.errors import UserError
from tinygpt.files.metrics import append_metrics, read_metrics, rewind_metrics
from tinygpt.tokenizer import CharTokenizer

FILE_NAME = "timeline.jsonl"
PROBE_LENGTH = 48  # characters of validation text in the default probe


def probe_of(tokenizer: CharTokenizer, val_ids: torch.Tensor, block_size: int, probe: str) -> torch.Tensor:
    """The probe's ids: the given text, or PROBE_LENGTH characters of validation text from a line start."""
    if not probe:
        length, start = min(PROBE_LENGTH, block_size), 0
        if "\n" in tokenizer.ids:
            ends = (val_ids[: len(val_ids) - length] == tokenizer.ids["\n"]).nonzero()  # (n, 1): line ends
            start = int(ends[0, 0]) + 1 if len(ends) else 0
        return val_ids[start : start + length].long()
    missing = tokenizer.unknown(probe)
    if missing:
        shown = ", ".join(repr(c) for c in missing[:10])
        raise UserError(
            f"train.timeline_probe holds characters that are not in the corpus ({shown}); "
            "use only the corpus's characters"
        )
    if len(probe) > block_size:
        raise UserError(
            f"train.timeline_probe has {len(probe)} characters, more than model.block_size = "
            f"{block_size}; shorten it"
        )
    return torch.tensor(tokenizer.encode(probe))


def append_snapshot(path: str | Path, snapshot: dict[str, Any]) -> None:
    append_metrics(path, snapshot)


def read_timeline(path: str | Path) -> list[dict[str, Any]]:
    """Every whole snapshot in the file (none if it is absent), a torn line dropped with a note."""
    return read_metrics(path)


def rewind_timeline(path: str | Path, step: int) -> None:
    """Keep only the snapshots up to and including `step`, atomically."""
    rewind_metrics(path, step)
