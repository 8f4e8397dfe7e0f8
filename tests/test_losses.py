"""Each loss against values worked out by hand on a two-sequence batch."""

import math
from dataclasses import replace

import pytest
import torch

from eppo_train.algos.losses import (
    LOSSES,
    ClipCovOptions,
    KlCovOptions,
    LossInputs,
    aggregate,
    clip_cov,
    k3,
    kl_cov,
    ppo_clip,
    token_weights,
)

LOG = math.log


def batch(eps_low=0.2, eps_high=0.2, **kw):
    # seq 0: A=+1, ratios 1.4, 0.6, 1.0 ; seq 1: A=-1, ratios 1.4, 0.6 and one padded token
    new = torch.tensor([[LOG(0.7), LOG(0.3), LOG(0.5)], [LOG(0.7), LOG(0.3), 0.0]], requires_grad=True)
    old = torch.tensor([[LOG(0.5)] * 3, [LOG(0.5), LOG(0.5), 0.0]])
    adv = torch.tensor([[1.0] * 3, [-1.0] * 3])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    lo, hi = torch.full_like(mask, eps_low), torch.full_like(mask, eps_high)
    return LossInputs(new, old, adv, mask, lo, hi, **kw)


def test_ppo_clip_symmetric_by_hand():
    inp = batch()
    out = ppo_clip(inp)
    # seq0 (A=+1): min(1.4, 1.2) -> -1.2 clipped; min(0.6, 0.8) -> -0.6; r=1 -> -1
    # seq1 (A=-1): max(1.4, 1.2) -> 1.4 (not clipped); max(0.6, 0.8) -> 0.8 clipped
    expected = torch.tensor([[-1.2, -0.6, -1.0], [1.4, 0.8, 0.0]])
    assert torch.allclose(out.per_token, expected, atol=1e-6)
    assert out.clipped.tolist() == [[True, False, False], [False, True, False]]
    # seq mean: ((-1.2 - 0.6 - 1) / 3 + (1.4 + 0.8) / 2) / 2 = (-0.93333 + 1.1) / 2
    w = token_weights(inp.mask, "seq_mean", total_tokens=5, total_seqs=2)
    loss = aggregate(out, w)
    assert loss.item() == pytest.approx((-2.8 / 3 + 2.2 / 2) / 2, abs=1e-6)
    loss.backward()
    # d/dlogp of -A r is -A r where unclipped, 0 where clipped; weighted by 1/(3*2) and 1/(2*2)
    grad = inp.logprobs.grad
    assert torch.allclose(grad, torch.tensor([[0.0, -0.6 / 6, -1.0 / 6], [1.4 / 4, 0.0, 0.0]]), atol=1e-6)


def test_dapo_clip_higher_and_token_mean():
    inp = batch(0.2, 0.28)
    out = LOSSES["dapo"].fn(inp)
    expected = torch.tensor([[-1.28, -0.6, -1.0], [1.4, 0.8, 0.0]])
    assert torch.allclose(out.per_token, expected, atol=1e-6)
    loss = aggregate(out, token_weights(inp.mask, "token_mean", 5, 2))
    assert loss.item() == pytest.approx((-1.28 - 0.6 - 1.0 + 1.4 + 0.8) / 5, abs=1e-6)
    assert LOSSES["dapo"].eps_high == 0.28 and LOSSES["dapo"].agg == "token_mean"


def test_per_token_bounds_differ_by_row():
    # EPPO: row 0 gets a tight range (0.1), row 1 a loose one (0.5): a bound is just a tensor
    inp = batch()
    inp.eps_low = torch.tensor([[0.1] * 3, [0.5] * 3])
    inp.eps_high = torch.tensor([[0.1] * 3, [0.5] * 3])
    out = LOSSES["eppo"].fn(inp)
    # row0: min(1.4, 1.1) -> -1.1; min(0.6, 0.9) -> -0.6. row1: max(1.4, 1.5)... A=-1: -A*clip(1.4)=1.4, 0.6 vs 0.5 -> 0.6
    assert torch.allclose(out.per_token, torch.tensor([[-1.1, -0.6, -1.0], [1.4, 0.6, 0.0]]), atol=1e-6)
    assert out.clipped.tolist() == [[True, False, False], [False, False, False]]
    assert LOSSES["eppo"].paced and not LOSSES["grpo"].paced


def test_kl_to_reference():
    ref = torch.full((2, 3), LOG(0.5))
    out = ppo_clip(batch(ref_logprobs=ref, kl_coef=0.1))
    # k3(new=0.7, ref=0.5) = 0.5/0.7 - log(0.5/0.7) - 1
    kl = 0.5 / 0.7 - LOG(0.5 / 0.7) - 1
    assert out.per_token[0, 0].item() == pytest.approx(-1.2 + 0.1 * kl, abs=1e-6)
    assert out.per_token[1, 2].item() == 0.0  # padding stays zero
    assert k3(torch.tensor(LOG(0.7)), torch.tensor(LOG(0.5))).item() == pytest.approx(kl, abs=1e-6)


def cov_batch(shift=0.0):
    # one sequence of 4 tokens: centred log-probs [1, -1.5, 0, 0.5], advantages [1, -1, 0, 0] (mean 0)
    # covariances: [1.0, 1.5, 0, 0]: only token 1 lies strictly inside (1, 5)
    new = torch.tensor([[-1.0, -3.5, -2.0, -1.5]], requires_grad=True)
    old = new.detach() - shift
    adv = torch.tensor([[1.0, -1.0, 0.0, 0.0]])
    mask = torch.ones(1, 4)
    return LossInputs(new, old, adv, mask, torch.full_like(mask, 0.2), torch.full_like(mask, 0.28))


def test_clip_cov_detaches_the_high_covariance_token():
    inp = cov_batch()
    out = clip_cov(inp)
    # ratio 1 everywhere: per-token -A -> [-1, 1, 0, 0], token 1 detached -> 0
    assert torch.allclose(out.per_token, torch.tensor([[-1.0, 0.0, 0.0, 0.0]]))
    assert out.clipped.tolist() == [[False, True, False, False]]
    out.per_token.sum().backward()
    assert inp.logprobs.grad[0, 1].item() == 0.0 and inp.logprobs.grad[0, 0].item() == pytest.approx(-1.0)


def test_clip_cov_keeps_the_kl_penalty_on_a_detached_token():
    # Clip-Cov detaches the policy-gradient term of the chosen token; the KL penalty to the reference still acts
    # there (verl adds it as a separate loss). ref log-prob -3.0 everywhere; token 1 (log pi -3.5) is detached:
    # k3 = exp(-3.0 + 3.5) - 0.5 - 1 = e^0.5 - 1.5, its gradient kl_coef * (1 - e^0.5)
    inp = cov_batch()
    inp.ref_logprobs, inp.kl_coef = torch.full((1, 4), -3.0), 0.1
    out = clip_cov(inp)
    assert out.clipped.tolist() == [[False, True, False, False]]
    assert out.per_token[0, 1].item() == pytest.approx(0.1 * (math.exp(0.5) - 1.5), abs=1e-6)
    out.per_token.sum().backward()
    assert inp.logprobs.grad[0, 1].item() == pytest.approx(0.1 * (1 - math.exp(0.5)), abs=1e-6)
    # token 0 keeps both: -A r (gradient -1) plus the penalty (gradient 0.1 * (1 - e^-2))
    assert inp.logprobs.grad[0, 0].item() == pytest.approx(-1.0 + 0.1 * (1 - math.exp(-2.0)), abs=1e-6)


def test_kl_cov_penalises_the_top_covariance_token():
    inp = cov_batch(shift=0.2)  # ratio e^0.2 on every token
    inp.options = KlCovOptions(ratio=0.25, coef=1.0)  # k = 1 of 4 tokens
    out = kl_cov(inp)
    r = math.exp(0.2)
    assert torch.allclose(out.per_token, torch.tensor([[-r, r + 0.2, 0.0, 0.0]]), atol=1e-6)
    assert out.clipped.tolist() == [[False, True, False, False]]


def test_registry_has_every_loss():
    assert set(LOSSES) >= {"grpo", "dapo", "eppo", "clip_cov", "kl_cov"}
    assert (LOSSES["grpo"].eps_low, LOSSES["grpo"].eps_high) == (0.2, 0.2)


# ---------------------------------------------------------------------------------------------------------------
# Differential checks: each loss against a plain-Python transcription of its formula, on random padded batches
# whose masked-off positions hold garbage (as the learner's do: the advantage fills the prompt's positions too).


def random_batch(seed, ref=False):
    g = torch.Generator().manual_seed(seed)
    lengths = [5, 3, 4]
    mask = torch.tensor([[1.0] * n + [0.0] * (5 - n) for n in lengths])
    mask[1, 0] = 0.0  # a prompt position inside the row
    new = (-0.1 - 3.9 * torch.rand(3, 5, generator=g)).requires_grad_(True)
    old = new.detach() + (torch.rand(3, 5, generator=g) - 0.5)  # ratios e^-0.5 .. e^0.5: both clip sides hit
    adv = torch.tensor([[2.0], [-1.5], [0.5]]).expand(3, 5).clone()
    adv[0, 1] = 0.0  # a zero advantage
    lo, hi = torch.full_like(mask, 0.2), torch.full_like(mask, 0.28)
    kw = {"ref_logprobs": new.detach() + torch.rand(3, 5, generator=g) - 0.5, "kl_coef": 0.3} if ref else {}
    return LossInputs(new, old, adv, mask, lo, hi, **kw)


def masked_cells(inp):
    return [(i, j) for i in range(inp.mask.shape[0]) for j in range(inp.mask.shape[1]) if inp.mask[i, j] > 0]


def ref_ppo_token(inp, i, j):
    """-min(r A, clip(r) A) in the case form: A >= 0 caps r at 1 + eps_high, A < 0 floors it at 1 - eps_low."""
    r = math.exp(float(inp.logprobs.detach()[i, j]) - float(inp.old_logprobs[i, j]))
    a, lo, hi = float(inp.advantages[i, j]), float(inp.eps_low[i, j]), float(inp.eps_high[i, j])
    value = -a * min(r, 1 + hi) if a >= 0 else -a * max(r, 1 - lo)
    clipped = (a > 0 and r > 1 + hi) or (a < 0 and r < 1 - lo)
    return value, clipped


def ref_k3(p, q):  # KL(p || q) from a sample of p: q/p - log(q/p) - 1 with p, q as log-probs
    return math.exp(q - p) - (q - p) - 1


def ref_cov(inp):
    cells = masked_cells(inp)
    a_mean = sum(float(inp.advantages[c]) for c in cells) / len(cells)
    lp_mean = sum(float(inp.logprobs.detach()[c]) for c in cells) / len(cells)
    return {c: (float(inp.advantages[c]) - a_mean) * (float(inp.logprobs.detach()[c]) - lp_mean) for c in cells}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ref", [False, True])
def test_ppo_clip_matches_the_formula_and_ignores_masked_off_positions(seed, ref):
    inp = random_batch(seed, ref)
    out = ppo_clip(inp)
    cells = masked_cells(inp)
    for i in range(3):
        for j in range(5):
            if (i, j) not in cells:
                assert out.per_token[i, j] == 0 and not out.clipped[i, j] and out.approx_kl[i, j] == 0, (i, j)
                continue
            value, clipped = ref_ppo_token(inp, i, j)
            if ref:
                value += 0.3 * ref_k3(float(inp.logprobs.detach()[i, j]), float(inp.ref_logprobs[i, j]))
            assert out.per_token[i, j].item() == pytest.approx(value, abs=1e-5), (i, j)
            assert bool(out.clipped[i, j]) == clipped, (i, j)
            # approx_kl is KL(old || new) from samples of the old policy: r - log r - 1 with r = pi / pi_old
            r = math.exp(float(inp.logprobs.detach()[i, j]) - float(inp.old_logprobs[i, j]))
            assert out.approx_kl[i, j].item() == pytest.approx(r - math.log(r) - 1, abs=1e-6), (i, j)
    assert any(ref_ppo_token(inp, *c)[1] for c in cells)  # the batch does clip somewhere


def test_the_clip_fraction_never_counts_a_masked_off_position():
    # a prompt position with A = -1 and ratio 0.5 (below 1 - eps_low) would be clipped were it in the loss
    inp = batch()
    inp.mask = torch.tensor([[0.0, 1, 1], [1, 1, 0]])
    inp.old_logprobs = inp.old_logprobs.clone()
    inp.old_logprobs[1, 2] = LOG(2.0)  # padded token: ratio exp(0 - log 2) = 0.5, A = -1
    out = ppo_clip(inp)
    assert out.clipped.tolist() == [[False, False, False], [False, True, False]]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ref", [False, True])
def test_kl_cov_matches_the_formula_on_a_padded_batch(seed, ref):
    inp = random_batch(seed, ref)
    inp.options = KlCovOptions(ratio=0.25, coef=0.7)  # 11 masked tokens: k = int(2.75) = 2
    out = kl_cov(inp)
    cov = ref_cov(inp)
    top = sorted(cov, key=cov.get, reverse=True)[:2]
    for (i, j), _ in cov.items():
        lr = float(inp.logprobs.detach()[i, j]) - float(inp.old_logprobs[i, j])
        value = -float(inp.advantages[i, j]) * math.exp(lr)  # unclipped
        if (i, j) in top:
            value += 0.7 * abs(lr)
        if ref:
            value += 0.3 * ref_k3(float(inp.logprobs.detach()[i, j]), float(inp.ref_logprobs[i, j]))
        assert out.per_token[i, j].item() == pytest.approx(value, abs=1e-5), (i, j)
    assert {(i, j) for i, j in torch.nonzero(out.clipped).tolist()} == set(top)
    assert float((out.per_token.detach() * (1 - inp.mask)).abs().sum()) == 0.0


def clip_cov_case(seed, ratio, lb=-0.05, ub=0.5, ref=False):
    inp = random_batch(seed, ref)
    inp.options = ClipCovOptions(ratio=ratio, lb=lb, ub=ub)
    plain = ppo_clip(replace(inp, ref_logprobs=None))
    cov = ref_cov(inp)
    candidates = {c for c, v in cov.items() if lb < v < ub and not plain.clipped[c]}
    return inp, plain, cov, candidates


@pytest.mark.parametrize("seed", range(4))
def test_clip_cov_detaches_exactly_the_unclipped_tokens_inside_the_window(seed):
    # ratio 1: the share covers every candidate, so the choice is no longer random
    inp, plain, cov, candidates = clip_cov_case(seed, ratio=1.0, ref=True)
    assert candidates and len(candidates) < len(cov)  # the window and the clip both leave tokens out
    out = clip_cov(inp)
    for c in cov:
        kl = 0.3 * ref_k3(float(inp.logprobs.detach()[c]), float(inp.ref_logprobs[c]))
        want = kl if c in candidates else float(plain.per_token.detach()[c]) + kl
        assert out.per_token[c].item() == pytest.approx(want, abs=1e-5), c
        assert bool(out.clipped[c]) == (c in candidates or bool(plain.clipped[c])), c
    assert float((out.per_token.detach() * (1 - inp.mask)).abs().sum()) == 0.0  # the KL term stays off the padding


def test_clip_cov_detaches_its_share_of_tokens_and_no_more():
    # 11 masked tokens x ratio 0.2 -> int(2.2) = 2 of the candidates (there are more)
    inp, plain, _, candidates = clip_cov_case(0, ratio=0.2, lb=-10.0, ub=10.0)
    assert len(candidates) > 2
    inp.generator = torch.Generator().manual_seed(0)
    out = clip_cov(inp)
    detached = {tuple(c) for c in torch.nonzero(out.clipped & ~plain.clipped).tolist()}
    assert len(detached) == 2 and detached <= candidates
    # a tiny share still detaches one token (at least one, as in verl)
    inp.options = ClipCovOptions(ratio=1e-6, lb=-10.0, ub=10.0)
    out = clip_cov(inp)
    assert len({tuple(c) for c in torch.nonzero(out.clipped & ~plain.clipped).tolist()}) == 1


def test_each_registered_loss_has_its_published_settings():
    table = {name: (LOSSES[name].fn, LOSSES[name].eps_low, LOSSES[name].eps_high, LOSSES[name].agg,
                    LOSSES[name].paced, LOSSES[name].options) for name in ("grpo", "dapo", "eppo", "clip_cov", "kl_cov")}
    assert table == {
        "grpo": (ppo_clip, 0.2, 0.2, "seq_mean", False, None),
        "dapo": (ppo_clip, 0.2, 0.28, "token_mean", False, None),
        "eppo": (ppo_clip, 0.2, 0.28, "token_mean", True, None),
        "clip_cov": (clip_cov, 0.2, 0.28, "token_mean", False, ClipCovOptions),
        "kl_cov": (kl_cov, 0.2, 0.28, "token_mean", False, KlCovOptions),
    }


def test_token_weights_of_a_micro_batch_use_the_whole_mini_batch():
    # a mini-batch of 4 sequences (3, 2, 4, 1 tokens = 10) split into two micro-batches of two rows each
    first = torch.tensor([[0.0, 1, 1, 1], [0, 1, 1, 0]])
    second = torch.tensor([[1.0, 1, 1, 1], [0, 0, 0, 1]])
    tm = [token_weights(m, "token_mean", total_tokens=10, total_seqs=4) for m in (first, second)]
    assert torch.allclose(tm[0], first / 10) and torch.allclose(tm[1], second / 10)
    sm = [token_weights(m, "seq_mean", total_tokens=10, total_seqs=4) for m in (first, second)]
    assert torch.allclose(sm[0], torch.tensor([[0.0, 1 / 12, 1 / 12, 1 / 12], [0, 1 / 8, 1 / 8, 0]]))
    assert torch.allclose(sm[1], torch.tensor([[1 / 16, 1 / 16, 1 / 16, 1 / 16], [0, 0, 0, 1 / 4]]))
    assert sum(float(w.sum()) for w in tm) == pytest.approx(1.0)  # each accumulation sums to one batch's mean
    assert sum(float(w.sum()) for w in sm) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        token_weights(first, "sum", 10, 4)
