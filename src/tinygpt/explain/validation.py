"""The splits of the text a checkpoint learned from: the corpus its config names, checked to be that text.
Every view that scores a model on text it did not train on (heads, ablation means, the timeline, neurons,
features) reads the validation split here; a feature dictionary trains on the training split."""

from pathlib import Path

import torch

from tinygpt.config.run_config import from_dict
from tinygpt.data.corpus import BUILTIN_CORPORA, Corpus, load_corpus
from tinygpt.errors import UserError
from tinygpt.files.checkpoint import Checkpoint


def validation_split_of(checkpoint: Checkpoint, block_size: int, path: str | Path) -> torch.Tensor:
    """The validation ids of the corpus a checkpoint was trained on, checked to be the text it learned."""
    return corpus_of(checkpoint, block_size, path).val


def corpus_of(checkpoint: Checkpoint, block_size: int, path: str | Path) -> Corpus:
    """The corpus a checkpoint was trained on, split as it was, checked to be the text it learned."""
    data = checkpoint.run_section("data")
    if data is None:
        raise UserError(
            f"{path} does not say which corpus it was trained on; use a checkpoint written by training"
        )
    section = from_dict({"data": data}, source=f"{path}'s config").data
    named = Path(section.corpus).expanduser()
    if section.corpus not in BUILTIN_CORPORA and not named.exists():  # moved, or trained from elsewhere
        where, fix = "which no longer exists", "put the corpus back"
        if not named.is_absolute():
            where = f"a path relative to the directory training ran in, and {Path.cwd()} holds no {named}"
            fix = f"run this from the directory training ran in, or {fix}"
        raise UserError(
            f"{path} was trained on the corpus {named}, {where}; this needs the text the model learned "
            f"from: {fix}"
        )
    corpus = load_corpus(section, block_size)
    if corpus.tokenizer.chars != checkpoint.chars:
        raise UserError(
            f"the corpus {corpus.path} that {path} was trained on has other characters now; "
            "this needs the text the model learned from"
        )
    return corpus
