"""Measure what attribution and patching say about an induction run; write the figures into docs/circuits.md.

    python scripts/attribution_figures.py --run checkpoints/induction

From the run's best.pt, with the induction head as `inspect --heads` names it (the layer-1-or-later
head with the best induction score):

(a) attribution: on the induction probes (random characters, then a random string written twice;
    the probes `inspect --heads` scores on), at every position of the second copy that has a next
    character to copy, whether the induction head is the largest positive part of that character's
    logit (tinygpt.explain.attribution);
(b) patching: on PAIRS clean/corrupted pairs in the corpus's own form ("kdqbhajt kdqbhajt", cut before
    its last character) whose corrupted prompt has other letters in the first copy, what each head's
    output alone restores of the clean logit difference (tinygpt.explain.patching). The head that
    "plays no part" is chosen before patching, by `inspect --heads`: the head other than the induction
    head whose switching off raises the loss on the probes' second copies least.

Writes the block between `<!-- figures: patching -->` (or --block's name) and `<!-- /figures -->` of
docs/circuits.md (or --doc), and prints it.
"""

import argparse
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # works from a plain checkout too
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its neighbours, also when a test loads it

import torch  # noqa: E402
from circuit_figures import replace_block  # noqa: E402

import tinygpt  # noqa: E402
from tinygpt.errors import UserError  # noqa: E402
from tinygpt.explain.ablate import ablated  # noqa: E402
from tinygpt.explain.attribution import logit_parts  # noqa: E402
from tinygpt.explain.heads import Heads, checkpoint_heads, induction_probes  # noqa: E402
from tinygpt.explain.patching import Patching, patching, patching_text  # noqa: E402
from tinygpt.explain.roles import Boundaries, probe_distances  # noqa: E402
from tinygpt.files.atomic import write_atomic  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAIRS = 20  # clean/corrupted pairs patched
PAIR_SEED = 0
LENGTH = 12  # letters in each pair's string


def roles(heads: Heads) -> tuple[tuple[int, int], tuple[int, int]]:
    """The induction head (best induction score in layer 1 or later) and the head that plays no part in
    it (the smallest rise of the probes' loss when it alone is off), as (layer, head)."""
    later = [r for r in heads.reports if r.layer >= 1]
    best = max(later, key=lambda r: r.scores["induction"])
    rest = [r for r in heads.reports if (r.layer, r.head) != (best.layer, best.head)]
    idle = min(rest, key=lambda r: r.induction_loss - heads.induction_loss)
    return (best.layer, best.head), (idle.layer, idle.head)


@dataclass
class Share:
    """What attribution says at the probes' second-copy positions (those with a next character to copy)."""

    positions: int
    probes: int
    largest: dict[str, int]  # part -> at how many positions it was the largest positive part
    head_wins: int  # positions where the induction head was the largest positive part among the heads
    means: dict[str, float]  # part -> its mean over the positions
    means_off: dict[str, float]  # the same with the induction head switched off (zero)


def attribution_share(lm, head: tuple[int, int]) -> Share:
    """The copied character's logit split into parts at every second-copy position of the induction probes,
    with every head on and with the induction head off."""
    cfg = lm.model.config
    probes = induction_probes(cfg.vocab_size, cfg.block_size, avoid=Boundaries.of(lm.tokenizer.ids).any)
    T, name = probes.size(1), f"{head[0]}.{head[1]}"
    share = Share(0, len(probes), {}, 0, {}, {})
    for row, d in zip(probes.tolist(), probe_distances(len(probes), T).tolist(), strict=True):
        for i in range(T - d, T - 1):  # second-copy positions whose next character is a copy
            copied = lm.tokenizer.chars[row[i + 1]]
            parts = logit_parts(lm.model, lm.tokenizer, row, i, copied, None).parts
            with ablated(lm.model, [head]):
                off = logit_parts(lm.model, lm.tokenizer, row, i, copied, None).parts
            largest = max(parts, key=parts.get)
            share.largest[largest] = share.largest.get(largest, 0) + 1
            heads = {k: v for k, v in parts.items() if k[0].isdigit()}
            share.head_wins += max(heads, key=heads.get) == name
            for into, found in ((share.means, parts), (share.means_off, off)):
                for k, v in found.items():
                    into[k] = into.get(k, 0.0) + v
            share.positions += 1
    for into in (share.means, share.means_off):
        for k in into:
            into[k] /= share.positions
    return share


def pairs(lm) -> Iterator[tuple[str, str]]:
    """Clean "s s" (the last letter cut off) and corrupted "r s" (r: other letters in every place), seeded."""
    letters = [c for c in lm.tokenizer.chars if c.isalpha()]
    rng = random.Random(PAIR_SEED)
    while True:
        s = rng.sample(letters, LENGTH)
        r = [rng.choice([c for c in letters if c != x]) for x in s]
        yield f"{''.join(s)} {''.join(s)}"[:-1], f"{''.join(r)} {''.join(s)}"[:-1]


def patched(lm, head: tuple[int, int], idle: tuple[int, int]) -> tuple[list[float], list[float], Patching]:
    """The induction head's and the idle head's scores on the first PAIRS pairs whose clean and corrupted
    runs predict different characters (the others have no default versus), and the first pair's patching."""
    ours, theirs, first = [], [], None
    for clean, corrupted in pairs(lm):
        if len(ours) == PAIRS:
            break
        try:
            found = patching(lm.model, lm.tokenizer, lm.to_tokens(clean), lm.to_tokens(corrupted))
        except UserError:  # both runs predict the same character
            continue
        first = first or found
        ours.append(found.heads[head].item())
        theirs.append(found.heads[idle].item())
    return ours, theirs, first


def block(run: Path, head: tuple[int, int], idle: tuple[int, int], share: Share, scores: tuple) -> str:
    """The guide's block: the two heads, what attribution and patching measured, and the first pair."""
    ours, theirs, example = scores
    h, i, n = f"{head[0]}.{head[1]}", f"{idle[0]}.{idle[1]}", share.positions
    won = share.largest.get(h, 0)
    rest = ", ".join(f"{k} at {v}" for k, v in sorted(share.largest.items(), key=lambda kv: -kv[1]) if k != h)
    means = ", ".join(f"{k} {v:+.2f}" for k, v in share.means.items())
    means_off = ", ".join(f"{k} {v:+.2f}" for k, v in share.means_off.items())
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return "\n".join(
        [
            f"Run: `{run}`. The induction head (`inspect --heads`'s best layer-1 induction score): **{h}**; "
            f"the head that plays no part (switching it off raises the probes' loss least): **{i}**.",
            "",
            f"- Attribution, at the {n} second-copy positions of the {share.probes} induction probes that "
            f"have a next character to copy, that character's logit: {h} is the largest positive part at "
            f"{won} ({won / n:.0%}); the largest was {rest or 'no other part'}. Among the heads alone, {h} "
            f"is the largest positive part at {share.head_wins} ({share.head_wins / n:.0%}).",
            f"- The mean parts there: {means}. With {h} switched off (zero): {means_off}.",
            f"- Patching, over {len(ours)} clean/corrupted pairs ({LENGTH} letters written twice, the last "
            "one cut off; the first copy's letters all changed in the corrupted prompt; the pairs whose two "
            "runs predicted the same character left out, as they have no default --versus): "
            f"{h}'s output alone restores {mean(ours):.2f} of the clean "
            f"logit difference on average (from {min(ours):.2f} to {max(ours):.2f}); {i}'s "
            f"{mean(theirs):.2f} (from {min(theirs):.2f} to {max(theirs):.2f}).",
            "",
            "The first pair, as `inspect --patch` prints it:",
            "",
            "```text",
            patching_text(example),
            "```",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run", default="checkpoints/induction", help="an induction run (configs/induction.yaml)"
    )
    parser.add_argument("--doc", default=str(ROOT / "docs" / "circuits.md"))
    parser.add_argument(
        "--block", default="patching", help="the figures block to fill (patching_attention_only for that run)"
    )
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    try:
        run = Path(args.run)
        lm = tinygpt.load(run / "best.pt")
        head, idle = roles(checkpoint_heads(run / "best.pt"))
        text = block(run, head, idle, attribution_share(lm, head), patched(lm, head, idle))
        doc = Path(args.doc)
        write_atomic(doc, replace_block(doc.read_text(encoding="utf-8"), args.block, text))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text)
    print(f"wrote the figures in {args.doc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
