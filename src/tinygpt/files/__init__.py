"""The run's files: what a run directory holds, each format in one module, each written whole or not at all.

atomic.py       writing a file whole or not at all (a temporary file, fsync, rename; never through a link)
integrity.py    a file's digest and seal, and why a damaged or foreign file is refused
checkpoint.py   the checkpoint: its fields, its file, upgrades from older versions
metrics.py      metrics.jsonl: one line per evaluation, rewound on --resume
snapshots.py    timeline.jsonl: head scores and the probe's attention at every evaluation
feature_file.py features/<site>.<layer>.pt: a dictionary of features, its quality and notes, sealed
"""
