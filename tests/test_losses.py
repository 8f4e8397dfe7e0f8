"""Each loss against values worked out by hand on a two-sequence batch."""

import math

import pytest
import torch

from eppo_train.losses import (
    LOSSES,
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
