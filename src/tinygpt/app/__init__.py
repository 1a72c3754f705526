"""The commands and the Python API they are built on, above training/, explain/ and the core.

api.py          the Python API, all of it: tinygpt.train, timeline, attention_by_hand, and tinygpt.load's
                TinyGPT, on which every command that looks inside or samples is built

cli.py          the parser (each command's options) and the error policy: one line, exit 2
usage.py        argparse's own complaints (a value of the wrong kind, an unknown option) said in that line
commands.py     one function per command, importing what it runs only when it runs
job_exit.py     how a failed rank of a torchrun job ends (shared by cli and train)
sample.py       sampling's options checked, and continuations of a prompt, streamed
features.py     `tinygpt features`, a run's feature files, `inspect --features`, `--steer` read into steers
evaluate.py     `tinygpt evaluate`: a checkpoint's loss on a whole split
bench.py        `tinygpt bench`: training and generation speed, memory, MFU
export.py       `tinygpt export`: a new directory for Hugging Face, TransformerLens, SAELens (a run's
                dictionary), or bare safetensors
hf.py           the model as a transformers GPT-2: weights, config, tokenizer, model card
lens_bridge.py  the model in TransformerLens (its TransformerBridge); a dictionary in SAELens's layout
"""
