"""The run config: every key in a dataclass, read from YAML with dotted overrides.

run_config.py   the sections and their keys, overrides, the shipped configs, the whole config's checks
checks.py       one value checked against its field: kind, range, choices, with a suggestion
yaml_file.py    a YAML file read safely, its mistakes said in one line
"""
