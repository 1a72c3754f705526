"""How heads compose: Q-, K- and V-composition scores from the weights alone.

A head reads the residual stream through its layer's ln_1 and writes into it through
its slice of c_proj. In the notation of Elhage et al. 2021 ("A Mathematical Framework
for Transformer Circuits"), for residual vectors x as columns and head h of a layer:

    W_Q, W_K, W_V   (hs, C)  h's rows of c_attn's query, key and value blocks
    W_O             (C, hs)  h's columns of c_proj
    N = P·diag(γ)   (C, C)   what ln_1 does to the stream before the head reads it:
                             P = I − 11ᵀ/C removes the mean, γ is ln_1's weight; its
                             division by the standard deviation (one number per position)
                             and its bias (the same vector at every position) are left out,
                             as neither depends on what an earlier head wrote
    W_QK = (W_Q N)ᵀ (W_K N)  (C, C)  the score of query x_q on key x_k is x_qᵀ W_QK x_k / √hs
    W_OV = W_O (W_V N)       (C, C)  what the head adds to the stream for a value x

An earlier head a (layer i) composes with a later head b (layer j > i) when what a
writes changes what b computes. Each score is a Frobenius norm of the product,
divided by the product of the two norms, so it lies in [0, 1] and ignores scale:

    Q-composition   ‖W_QKᵇᵀ W_OVᵃ‖ / (‖W_QKᵇ‖ ‖W_OVᵃ‖)   a's output moves b's queries
    K-composition   ‖W_QKᵇ  W_OVᵃ‖ / (‖W_QKᵇ‖ ‖W_OVᵃ‖)   a's output moves b's keys
    V-composition   ‖W_OVᵇ  W_OVᵃ‖ / (‖W_OVᵇ‖ ‖W_OVᵃ‖)   b moves a's output on

The ln_1 of layer j sits between a's output and b's reading: it is folded into b's
matrices (N above), the earlier head's own ln_1 into its W_OV. The norms of two
independent random matrices multiply to about 1/√C of the product of their norms, so
scores near 1/√C are what chance gives (`baseline`); an induction head's K-composition
with the previous-token head it reads stands well above it.

The weights say which heads could work together; `knockouts` checks that they do: it
switches each head below the best induction head off in turn (tinygpt.explain.ablate) and
scores that head for induction again. `inspect --circuits` prints both.
"""

from dataclasses import dataclass
from pathlib import Path

import torch

from tinygpt.explain.ablate import head_batches, zeroing
from tinygpt.explain.heads import Heads, scoring_probes
from tinygpt.explain.roles import Boundaries, induction_scores
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.hooks import caught
from tinygpt.model import GPT

KINDS = ("Q", "K", "V")
SHOWN = 10  # edges `inspect --circuits` prints


@dataclass(frozen=True)
class Edge:
    """One composition: head `source` (layer, head) writes what head `target` reads, by `kind`."""

    kind: str  # Q, K or V
    source: tuple[int, int]
    target: tuple[int, int]
    score: float

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "source": list(self.source),
            "target": list(self.target),
            "score": self.score,
        }


def ln_fold(ln: torch.nn.Module) -> torch.Tensor:
    """N = P·diag(γ): a layer norm's centring and weight, as a matrix on column vectors: (C, C)."""
    C = ln.weight.numel()
    centre = torch.eye(C) - torch.full((C, C), 1.0 / C)  # P
    return torch.diag(ln.weight.detach().float()) @ centre  # γ ⊙ (P x) = diag(γ) P x


@dataclass
class Factored:
    """Matrices kept as their two factors, left @ right: left (..., C, r), right (..., r, C). A head's
    W_QK and W_OV have rank hs at most, so their norms and products' norms need only (r, r) matrices."""

    left: torch.Tensor
    right: torch.Tensor

    def __getitem__(self, index: int) -> "Factored":
        return Factored(self.left[index], self.right[index])

    @property
    def T(self) -> "Factored":
        """The transposes: (L R)ᵀ = Rᵀ Lᵀ."""
        return Factored(self.right.transpose(-1, -2), self.left.transpose(-1, -2))

    def norm(self) -> torch.Tensor:
        """The Frobenius norms, (...,): ‖L R‖² = Σ (LᵀL) ⊙ (R Rᵀ)."""
        return frobenius_squared(self.left, self.right, torch.eye(self.left.size(-1)).to(self.left)).sqrt()


def frobenius_squared(left: torch.Tensor, right: torch.Tensor, middle: torch.Tensor) -> torch.Tensor:
    """‖left @ middle @ right‖² = Σ (leftᵀ left · middle) ⊙ (middle · right rightᵀ), for broadcast batches
    of left (..., C, r), middle (..., r, s), right (..., s, C); only (r, s)-sized products."""
    gram_left = left.transpose(-1, -2) @ left  # (..., r, r)
    gram_right = right @ right.transpose(-1, -2)  # (..., s, s)
    return ((gram_left @ middle) * (middle @ gram_right)).sum((-1, -2)).clamp_min(0)


@torch.no_grad()
def head_circuits(model: GPT) -> tuple[Factored, Factored]:
    """Every head's W_QK and W_OV with its ln_1 folded in, factored: each of (n_layer, n_head, C, C), in
    float64 (the norms are sums of squares)."""
    cfg = model.config
    C, nh, hs = cfg.n_embd, cfg.n_head, cfg.head_size
    q_rows, k_rows, writes, v_rows = [], [], [], []
    for block in model.h:
        N = ln_fold(block.ln_1).double()  # (C, C)
        W = block.attn.c_attn.weight.detach().double().view(3, nh, hs, C)  # q, k, v blocks, per head
        W_O = block.attn.c_proj.weight.detach().double().view(C, nh, hs).permute(1, 0, 2)  # (nh, C, hs)
        q_rows.append(W[0] @ N)  # (nh, hs, C): W_Q N
        k_rows.append(W[1] @ N)
        v_rows.append(W[2] @ N)
        writes.append(W_O)
    qk = Factored(torch.stack(q_rows).transpose(-1, -2), torch.stack(k_rows))  # (W_Q N)ᵀ (W_K N)
    ov = Factored(torch.stack(writes), torch.stack(v_rows))  # W_O (W_V N)
    return qk, ov


def normalised(later: Factored, earlier: Factored) -> torch.Tensor:
    """‖later · earlier‖ / (‖later‖ ‖earlier‖) for every pair: b later and a earlier matrices -> (b, a)."""
    middle = later.right.unsqueeze(1) @ earlier.left.unsqueeze(0)  # (b, a, r, s): the factors that meet
    product = frobenius_squared(later.left.unsqueeze(1), earlier.right.unsqueeze(0), middle).sqrt()
    return (product / (later.norm().unsqueeze(1) * earlier.norm().unsqueeze(0))).float()


def composition(model: GPT) -> dict[str, torch.Tensor]:
    """Q-, K- and V-composition: {kind: (L, H, L, H)}, [i, a, j, b] from head i.a into head j.b.

    Entries where j ≤ i (a head cannot read what a head of its own or a later layer writes) are NaN.
    """
    qk, ov = head_circuits(model)  # (L, H, C, C) each, factored
    L, H = qk.left.shape[:2]
    scores = {kind: torch.full((L, H, L, H), float("nan")) for kind in KINDS}
    for j in range(1, L):
        for i in range(j):
            reading = {"Q": qk[j].T, "K": qk[j], "V": ov[j]}
            for kind in KINDS:
                scores[kind][i, :, j, :] = normalised(reading[kind], ov[i]).T  # (a, b)
    return scores


def baseline(n_embd: int) -> float:
    """What two independent random matrices score: about 1/√C."""
    return n_embd**-0.5


def edges(scores: dict[str, torch.Tensor]) -> list[Edge]:
    """Every composition as an edge, strongest first."""
    found = []
    for kind, s in scores.items():
        for i, a, j, b in (~s.isnan()).nonzero().tolist():
            found.append(Edge(kind, (i, a), (j, b), round(float(s[i, a, j, b]), 4)))
    return sorted(found, key=lambda e: -e.score)


@dataclass
class Knockout:
    """The head that scores highest for induction, and its score with each earlier head switched off."""

    target: tuple[int, int]
    score: float  # with every head on
    without: dict[tuple[int, int], float]  # earlier head -> the target's induction score with it off


@torch.no_grad()
def knockouts(model: GPT, avoid: list[int]) -> Knockout:
    """Switch each head of the layers below the best induction head off in turn (zero ablation) and score
    that head for induction again, on the same probes (tinygpt.explain.heads; none holds an id of avoid).

    The heads of a layer go off in one batch (tinygpt.explain.ablate.zeroing), from the stream entering
    that layer, through the blocks up to the induction head's own."""
    cfg = model.config
    probes = scoring_probes(cfg.vocab_size, cfg.block_size, avoid)  # (P, 2·half)
    model.eval()
    _, found = model.run_with_cache(probes, names=["blocks.*.attn.pattern", "blocks.*.resid_pre"])
    patterns = [found[f"blocks.{layer}.attn.pattern"].float() for layer in range(cfg.n_layer)]
    base = torch.stack([induction_scores(w) for w in patterns])  # (n_layer, n_head)
    layer, head = divmod(int(base[1:].argmax()) + cfg.n_head, cfg.n_head)  # layer 1 or later
    N, T = probes.shape
    without, target = {}, f"blocks.{layer}.attn.pattern"
    for source in range(layer):
        for heads in head_batches(cfg.n_head, N * T):
            seen: dict[str, torch.Tensor] = {}
            x = found[f"blocks.{source}.resid_pre"].repeat(len(heads), 1, 1)  # (k·N, T, C)
            with model.hooks({f"blocks.{source}.attn.z": zeroing(heads, N), target: caught(seen)}):
                for block in model.h[source : layer + 1]:
                    x = block(x)
            weights = seen[target].float().view(len(heads), N, cfg.n_head, T, T)
            for copy, a in enumerate(heads.tolist()):
                without[(source, a)] = round(float(induction_scores(weights[copy])[head]), 4)
    return Knockout((layer, head), round(float(base[layer, head]), 4), without)


def circuits_table(model: GPT, avoid: list[int], shown: int = SHOWN) -> str:
    """`inspect --circuits`: the strongest compositions, one line each, and what chance scores; then the
    knockouts (induction probes without the ids of avoid)."""
    cfg = model.config
    if cfg.n_layer < 2:
        return "one layer: no head reads what another head wrote, so nothing composes"
    lines = [f"{'kind':<6} {'from':<5} {'into':<5} {'score':>6}"]
    for e in edges(composition(model))[:shown]:
        source, target = ".".join(map(str, e.source)), ".".join(map(str, e.target))
        lines.append(f"{e.kind + '-comp':<6} {source:<5} {target:<5} {e.score:>6.3f}")
    lines.append(
        f"score: ‖W_QKᵀ W_OV‖ (Q), ‖W_QK W_OV‖ (K) or ‖W_OV W_OV‖ (V) over the product of the two norms, "
        f"ln_1 folded in; two random matrices score about {baseline(cfg.n_embd):.3f} (1/√{cfg.n_embd})"
    )
    k = knockouts(model, avoid)
    name = ".".join(map(str, k.target))
    lines += ["", f"head {name} scores {k.score:.3f} for induction (the best of layers 1 and up); with"]
    lines += [f"  head {i}.{a} off: {score:.3f}" for (i, a), score in k.without.items()]
    return "\n".join(lines)


def checkpoint_circuits(checkpoint: str | Path) -> str:
    saved = read_checkpoint(checkpoint)
    ends = Boundaries.of({c: i for i, c in enumerate(saved.chars)})
    return circuits_table(saved.build_model(checkpoint).eval(), ends.any)


# The page draws an edge whose score is at least this many times the random baseline. In
# configs/induction.yaml's run (Muon, seed 1) the circuit's K-composition scores 1.7× it and the next
# edge 1.3×; with the former AdamW recipe the circuit's scored 2.2×.
STRONG = 1.5


def page_circuits(model: GPT, heads: Heads | None, note: str | None) -> dict:
    """What the page's circuit view reads: every edge, the baseline, which edges to draw, and each
    head's description from its report (None, with a note, when the corpus it was trained on is not at
    hand to score them)."""
    base = baseline(model.config.n_embd)
    found = edges(composition(model)) if model.config.n_layer > 1 else []
    keep = ("layer", "head", "description", "profile", "importance")
    described = None if heads is None else [{k: getattr(r, k) for k in keep} for r in heads.reports]
    return {
        "edges": [e.as_dict() for e in found],
        "baseline": base,
        "strong": STRONG * base,
        "heads": described,
        "heads_note": None if heads is not None else f"no descriptions: {note}",
    }
