"""The commands: the command line and what each command does, above training/, explain/ and the core.

cli.py          the parser (each command's options) and the error policy: one line, exit 2
usage.py        argparse's own complaints (a value of the wrong kind, an unknown option) said in that line
commands.py     one function per command, importing what it runs only when it runs
job_exit.py     how a failed rank of a torchrun job ends (shared by cli and train)
sample.py       `tinygpt sample`: text from a checkpoint, streamed
evaluate.py     `tinygpt evaluate`: a checkpoint's loss on a whole split
bench.py        `tinygpt bench`: training and generation speed, memory, MFU
export.py       `tinygpt export`: a new directory for Hugging Face, TransformerLens, or bare safetensors
hf.py           the model as a transformers GPT-2: weights, config, tokenizer, model card
lens_bridge.py  the model in TransformerLens (its TransformerBridge)
"""
