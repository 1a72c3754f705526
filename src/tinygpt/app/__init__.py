"""The commands and the Python API they are built on, above training/, explain/ and the core.

api.py          tinygpt.train and tinygpt.timeline: the Python API's functions (`import tinygpt` names them)
loaded.py       tinygpt.load: a checkpoint for Python, and on it what inspect, explain and sample do

cli.py          the parser (each command's options) and the error policy: one line, exit 2
usage.py        argparse's own complaints (a value of the wrong kind, an unknown option) said in that line
commands.py     one function per command, importing what it runs only when it runs
job_exit.py     how a failed rank of a torchrun job ends (shared by cli and train)
sample.py       sampling's options checked, and continuations of a prompt, streamed
features.py     `tinygpt features`, a run's feature files, `inspect --features`, `--steer` read into steers
evaluate.py     `tinygpt evaluate`: a checkpoint's loss on a whole split
bench.py        `tinygpt bench`: training and generation speed, memory, MFU
export.py       `tinygpt export`: a new directory for Hugging Face, TransformerLens, or bare safetensors
hf.py           the model as a transformers GPT-2: weights, config, tokenizer, model card
lens_bridge.py  the model in TransformerLens (its TransformerBridge)
"""
