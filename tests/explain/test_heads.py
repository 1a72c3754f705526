"""Head roles, switching heads off and the logit lens, each held to an independent reference."""

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import looking_back_model

from tinygpt import GPT, GPTConfig
from tinygpt.data.corpus import validation_windows
from tinygpt.errors import UserError
from tinygpt.explain.ablate import ablated, mean_head_outputs, parse_heads
from tinygpt.explain.heads import entropy, head_reports, induction_probes, loss, losses, repeating
from tinygpt.explain.lens import logit_lens
from tinygpt.explain.roles import (
    ROLES,
    SHORT_NAMES,
    TABLE,
    THRESHOLDS,
    WORDS,
    Boundaries,
    induction_keys,
    induction_scores,
    label,
    role_scores,
)
from tinygpt.model import attention_weights

T = 16


def previous_token_model() -> GPT:
    return looking_back_model(1, T)


def test_a_head_built_to_look_one_back_scores_near_1_for_previous_and_is_labelled_so():
    model = previous_token_model()
    ids = torch.randint(5, (4, T), generator=torch.Generator().manual_seed(0))
    (weights,) = attention_weights(model, ids)
    ends = Boundaries(word=[0], line=[])
    scores = {role: float(s[0]) for role, s in role_scores(weights, ids, ends).items()}
    scores["induction"] = float(induction_scores(weights)[0])
    assert scores["previous"] > 0.99
    assert scores["self"] == pytest.approx(1 / T, abs=0.01)  # position 0 alone, which sees only itself
    assert scores["first"] < 0.1
    assert label(scores) == "previous"
    assert float(entropy(weights)[0]) < 0.05  # all of each row on one position


def test_role_scores_are_the_weights_where_each_role_says():
    """A uniform causal head: every score is a mean of 1/(i + 1) over the queries the role counts."""
    ids = torch.tensor([[1, 2, 0, 1, 2, 0]])  # 0 plays the space
    n = ids.size(1)
    weights = torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1).unsqueeze(1)  # (T, T), rows sum to 1
    scores = role_scores(weights.view(1, 1, n, n), ids, Boundaries(word=[0], line=[]))

    def mean_inverse(queries) -> float:
        return sum(1 / (i + 1) for i in queries) / len(queries)

    assert float(scores["previous"]) == pytest.approx(mean_inverse(range(1, n)))
    assert float(scores["self"]) == pytest.approx(mean_inverse(range(n)))
    assert float(scores["first"]) == pytest.approx(mean_inverse(range(1, n)))
    assert float(scores["same_char"]) == pytest.approx(mean_inverse([3, 4, 5]))  # one earlier twin each
    assert float(scores["word_start"]) == pytest.approx(mean_inverse([3, 4, 5]))  # a space at 2, before them
    assert float(scores["line_start"]) == 0.0  # no newline: no query has one before it


def test_a_head_that_looks_back_to_the_line_start_scores_1_for_line_start_only_there():
    """Each query's weight all on the latest newline before it: line_start 1; word_start counts the
    queries whose latest space or newline is that newline (not those after a space)."""
    ids = torch.tensor([[3, 1, 2, 0, 1, 2, 3, 1]])  # 3 plays the newline, 0 the space
    n = ids.size(1)
    weights = torch.zeros(1, 1, n, n)
    for i, key in enumerate([0, 0, 0, 0, 0, 0, 0, 6]):  # the latest newline before each query (0: itself)
        weights[0, 0, i, key] = 1.0
    scores = role_scores(weights, ids, Boundaries(word=[0, 3], line=[3]))
    assert float(scores["line_start"]) == 1.0  # queries 1 … 7 have a newline before them
    assert float(scores["word_start"]) == pytest.approx(4 / 7)  # 1, 2, 3 and 7; 4 … 6 have the space at 3


def small_model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=11, block_size=T, n_layer=2, n_head=4, n_embd=32)).eval()


def without_head_by_weights(model: GPT, layer: int, head: int, mean: torch.Tensor | None = None) -> GPT:
    """A copy whose c_proj ignores the head (its columns zeroed); with mean, adds the mean's share as bias."""
    copied = copy.deepcopy(model)
    proj = copied.h[layer].attn.c_proj
    part = slice(head * model.config.head_size, (head + 1) * model.config.head_size)
    with torch.no_grad():
        if mean is not None:
            proj.bias += proj.weight[:, part] @ mean[part]
        proj.weight[:, part] = 0.0
    return copied


def test_zero_ablation_equals_the_model_with_that_heads_projection_columns_removed():
    model = small_model()
    idx = torch.randint(11, (3, T))
    with ablated(model, [(1, 2)]):
        logits, _ = model(idx)
    reference, _ = without_head_by_weights(model, 1, 2)(idx)
    assert torch.allclose(logits, reference, atol=1e-6)
    assert not torch.allclose(logits, model(idx)[0], atol=1e-3)  # it did change something, and only inside
    explicit = {
        "blocks.*.attn.pattern": lambda weights, name: None
    }  # watching the weights: the plain formula
    with ablated(model, [(0, 0), (1, 3)]), model.hooks(explicit):  # the explicit path runs it too
        both, _ = model(idx)
    reference = without_head_by_weights(without_head_by_weights(model, 0, 0), 1, 3)(idx)[0]
    assert torch.allclose(both, reference, atol=1e-5)


def test_mean_ablation_replaces_the_head_by_its_mean_output():
    model = small_model(seed=1)
    windows = torch.randint(11, (8, T))
    means = mean_head_outputs(model, windows)
    idx = torch.randint(11, (2, T))
    with ablated(model, [(0, 1)], mode="mean", means=means):
        logits, _ = model(idx)
    reference, _ = without_head_by_weights(model, 0, 1, mean=means[0])(idx)
    assert torch.allclose(logits, reference, atol=1e-5)


def test_heads_are_named_as_layer_dot_head_and_checked():
    assert parse_heads("1.2, 0.3", n_layer=2, n_head=4) == [(1, 2), (0, 3)]
    for bad, message in (
        ("1-2", "LAYER.HEAD"),
        ("2.0", "layers 0 … 1"),
        ("0.4", "heads 0 … 3"),
        ("", "at least"),
    ):
        with pytest.raises(UserError, match=message):
            parse_heads(bad, n_layer=2, n_head=4)


def test_the_last_layers_lens_is_the_models_own_prediction():
    model = small_model(seed=2)
    ids = torch.randint(11, (T,)).tolist()
    lens = logit_lens(model, ids)
    assert lens.shape == (2, T, 11)
    logits, _ = model(torch.tensor([ids]))
    assert torch.allclose(lens[-1], logits[0], atol=1e-5)
    assert not torch.allclose(lens[0], logits[0], atol=1e-3)  # the first layer's guess is another


def test_every_head_gets_a_report_and_importance_is_the_loss_it_costs():
    model = small_model(seed=3)
    val = torch.randint(11, (400,))
    heads = head_reports(model, val, Boundaries(word=[0], line=[]), list("abcdefghijk"), windows=4)
    assert [(r.layer, r.head) for r in heads.reports] == [(layer, h) for layer in range(2) for h in range(4)]
    for r in heads.reports:
        assert all(0.0 <= s <= 1.0 for s in r.scores.values()) and r.entropy >= 0.0
    r = heads.reports[5]  # layer 1, head 1
    windows = validation_windows(val, T, 4)
    assert r.importance == pytest.approx(
        loss(without_head_by_weights(model, 1, 1), windows) - heads.loss, abs=1e-5
    )


def induction_model(vocab: int = 8) -> GPT:
    """Two layers, one head each, built by hand into the induction circuit.

    The residual stream has three parts: position (one-hot), token (one-hot; the LM head,
    tied, reads these dimensions) and previous token. Layer 0's head looks one back
    and copies that position's token into the previous-token part. Layer 1's head
    queries with its own token for a position whose previous token it is, and passes
    that position's token on, loudly, to the logits: after "… a b … a" it predicts "b".
    """
    pos, tok, prev = 0, T, T + vocab
    c = T + 2 * vocab
    model = GPT(GPTConfig(vocab_size=vocab, block_size=T, n_layer=2, n_head=1, n_embd=c, bias=False)).eval()
    eye = torch.eye(vocab)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (*[b.ln_1 for b in model.h], *[b.ln_2 for b in model.h], model.ln_f):
            norm.weight.fill_(1.0)
        model.wpe.weight[:, pos : pos + T] = torch.eye(T)
        model.wte.weight[:, tok : tok + vocab] = eye
        q, k, v = model.h[0].attn.c_attn.weight.split(c)
        for p in range(1, T):
            q[pos + p - 1, pos + p] = 30.0
        k[pos : pos + T, pos : pos + T] = torch.eye(T)
        v[tok : tok + vocab, tok : tok + vocab] = eye
        model.h[0].attn.c_proj.weight[prev : prev + vocab, tok : tok + vocab] = 3 * eye
        q, k, v = model.h[1].attn.c_attn.weight.split(c)
        q[prev : prev + vocab, tok : tok + vocab] = 30 * eye
        k[prev : prev + vocab, prev : prev + vocab] = eye
        v[tok : tok + vocab, tok : tok + vocab] = eye
        model.h[1].attn.c_proj.weight[tok : tok + vocab, tok : tok + vocab] = 20 * eye
    return model


def test_an_induction_circuit_built_by_hand_is_found_and_its_head_carries_the_second_copies():
    model = induction_model()
    val = torch.randint(8, (600,), generator=torch.Generator().manual_seed(1))
    heads = head_reports(model, val, Boundaries(word=[0], line=[]), list("abcdefgh"), windows=8)
    looks_back, induction = heads.reports
    assert looks_back.label == "previous" and looks_back.scores["previous"] > 0.99
    assert induction.scores["induction"] > 0.45 and induction.label == "induction"  # 7 letters repeat more
    assert induction.induction_loss - heads.induction_loss > 1.0  # without it the second copies are lost
    probes = induction_probes(8, T, avoid=[0])  # as head_reports draws them: no space
    elsewhere = ~induction_keys(*probes.shape).any(dim=-1)[:, :-1]  # (N, T − 1): nothing to copy from
    with ablated(model, [(1, 0)]):
        off = losses(model, probes)[elsewhere].mean()
    on = losses(model, probes)[elsewhere].mean()
    assert induction.induction_loss - heads.induction_loss > off - on + 1.0  # it helps where it copies


def test_every_role_is_one_record_with_its_words_for_the_page():
    """The page says in words what each label means: roles.WORDS, which page.py puts into its data."""
    assert list(WORDS) == [*ROLES, "mixed"] and all(WORDS.values())
    assert [role.name for role in TABLE] == list(ROLES) == list(THRESHOLDS) == list(SHORT_NAMES)
    assert all(len(role.short) <= 6 for role in TABLE)  # the width of a table's column
    script = (Path(__file__).resolve().parents[2] / "src/tinygpt/explain/assets/grid.js").read_text()
    assert "DATA.role_words[" in script and "ROLE_WORDS" not in script  # the page reads them from its data


def test_repeating_marks_where_the_last_four_characters_occurred_earlier_in_the_window():
    ids = torch.tensor([[1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 2, 3, 4, 1]])  # "abcde abcde" then "bcda"
    where = repeating(ids, k=4)[0].nonzero().flatten().tolist()
    assert where == [9, 10]  # the copy's "abcd" ends at 9, "bcde" at 10; "ebcd" (13) and "bcda" (14) are new


def test_every_head_off_in_one_batch_gives_the_numbers_of_switching_each_off_in_turn(monkeypatch):
    from tinygpt.explain import ablate
    from tinygpt.explain.ablate import each_head_off
    from tinygpt.explain.heads import induction_loss

    model = small_model(seed=5)
    val = torch.randint(11, (600,))
    heads = head_reports(model, val, Boundaries(word=[0], line=[]), list("abcdefghijk"), windows=5)
    text = validation_windows(val, T, 5)
    probes = induction_probes(11, T, avoid=[0])
    assert heads.loss == pytest.approx(loss(model, text), abs=1e-6)
    assert heads.induction_loss == pytest.approx(induction_loss(model, probes), abs=1e-6)
    for r in heads.reports:  # the loop the batch replaces: one head off, two passes of the whole model
        with ablated(model, [(r.layer, r.head)]):
            assert r.importance == pytest.approx(loss(model, text) - heads.loss, abs=1e-6)
            assert r.induction_loss == pytest.approx(induction_loss(model, probes), abs=1e-6)
        assert r.importance_se > 0
    monkeypatch.setattr(ablate, "CHUNK_POSITIONS", 1)  # one head a pass: the same numbers
    inputs, targets = text[:, :-1], text[:, 1:]
    every = per_head(model, inputs, targets)
    assert torch.allclose(each_head_off(model, inputs, targets), every, atol=1e-6)
    for last in (1, 7):  # the last positions alone: the same numbers there
        assert torch.allclose(each_head_off(model, inputs, targets, last=last), every[..., -last:], atol=1e-6)


def test_every_head_off_under_other_hooks_is_switching_each_off_under_them():
    """A user's hooks stay on: another head's output replaced (attn.z, read before the heads' shares are
    taken out) and a hook on resid_mid, which sees attention's whole output (that layer runs again)."""
    from tinygpt.explain.ablate import each_head_off

    model = small_model(seed=6)
    text = validation_windows(torch.randint(11, (600,)), T, 4)
    inputs, targets = text[:, :-1], text[:, 1:]

    def doubled_first_head(z: torch.Tensor, name: str) -> torch.Tensor:
        return torch.cat([2 * z[:, :1], z[:, 1:]], dim=1)  # (B, nh, T, hs)

    def squashed(x: torch.Tensor, name: str) -> torch.Tensor:
        return torch.tanh(x)

    with model.hooks({"blocks.0.attn.z": doubled_first_head, "blocks.1.resid_mid": squashed}):
        every = per_head(model, inputs, targets)
        assert torch.allclose(each_head_off(model, inputs, targets), every, atol=1e-6)
        assert torch.allclose(each_head_off(model, inputs, targets, last=3), every[..., -3:], atol=1e-6)


def per_head(model: GPT, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(n_layer, n_head, N, T): each head off in turn, the whole model run each time."""
    rows = []
    for layer in range(model.config.n_layer):
        for head in range(model.config.n_head):
            with ablated(model, [(layer, head)]), torch.no_grad():
                logits, _ = model(inputs)
            rows.append(F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none"))
    return torch.stack(rows).view(model.config.n_layer, model.config.n_head, *inputs.shape)
