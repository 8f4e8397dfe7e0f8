"""The sampler's distribution as the learner recomputes it (top-p, min-p), truncated importance weights, rescue@k and
the bf16 share a step changes: hand-computed values, and transformers' own warpers as the reference."""

import math

import pytest
import torch
from transformers.generation.logits_process import MinPLogitsWarper, TopPLogitsWarper

from eppo_train.algos.correction import truncated_weights
from eppo_train.algos.sampling import kept_tokens, processed_logprobs
from eppo_train.core.stats import rescue_at_k
from eppo_train.learner.master import MasterWeights, bf16_changed_share


def test_top_p_and_min_p_by_hand():
    # probabilities 0.5, 0.25, 0.15, 0.1
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1]]))
    # top-p 0.7: ascending cumulative 0.1, 0.25, 0.5, 1.0; drop where <= 0.3: the 0.1 and 0.15 tokens
    assert kept_tokens(logits, top_p=0.7).tolist() == [[True, True, False, False]]
    # token 1 under the cut: 0.25 / 0.75
    assert processed_logprobs(logits, torch.tensor([1]), top_p=0.7).item() == pytest.approx(math.log(1 / 3))
    # min-p 0.4: keep p >= 0.4 x 0.5 = 0.2
    assert kept_tokens(logits, min_p=0.4).tolist() == [[True, True, False, False]]
    # min-p 0.25 (keep >= 0.125: three tokens, mass 0.9), then top-p 0.6 over 0.5/0.9, 0.25/0.9, 0.15/0.9:
    # ascending cumulative 0.167, 0.444, 1.0; drop <= 0.4: only the 0.15 token -> keep 0.5 and 0.25
    assert kept_tokens(logits, top_p=0.6, min_p=0.25).tolist() == [[True, True, False, False]]
    # the sampled token stays in the support even where the learner's cut would drop it: 0.1 / (0.5 + 0.25 + 0.1)
    assert processed_logprobs(logits, torch.tensor([3]), top_p=0.7).item() == pytest.approx(math.log(0.1 / 0.85))
    # no cut: the plain log-softmax
    assert processed_logprobs(logits, torch.tensor([2])).item() == pytest.approx(math.log(0.15))


def test_the_cut_is_transformers_min_p_then_top_p_per_row():
    torch.manual_seed(0)
    logits = torch.randn(6, 50) * 3
    top_p = torch.tensor([1.0, 0.9, 0.5, 0.9, 0.3, 0.95])
    min_p = torch.tensor([0.0, 0.0, 0.1, 0.05, 0.2, 0.0])
    keep = kept_tokens(logits, top_p, min_p)
    for r in range(6):
        scores = logits[r : r + 1].clone()
        if min_p[r] > 0:
            scores = MinPLogitsWarper(float(min_p[r]))(None, scores)
        if top_p[r] < 1:
            scores = TopPLogitsWarper(float(top_p[r]))(None, scores)
        assert keep[r].tolist() == torch.isfinite(scores[0]).tolist(), r
        target = int(torch.argmax(logits[r]))
        want = torch.log_softmax(scores[0], -1)[target]
        got = processed_logprobs(logits[r : r + 1], torch.tensor([target]), top_p[r : r + 1], min_p[r : r + 1])
        assert got.item() == pytest.approx(want.item(), abs=1e-6)


def test_truncated_importance_weights_by_hand():
    learner = torch.tensor([0.0, -1.0, -2.0, -0.5, -3.0])
    # log(p/q) = ln 1.5, ln 3 (over the cap 2), -ln 2, 0 (off the mask), 0
    sampler = learner - torch.tensor([math.log(1.5), math.log(3.0), -math.log(2.0), 0.0, 0.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0])
    w, stats = truncated_weights(learner, sampler, mask, cap=2.0)
    assert w.tolist() == pytest.approx([1.5, 2.0, 0.5, 1.0, 1.0])
    assert stats.tokens == 4 and stats.clipped == 1
    assert stats.abs_diff == pytest.approx(math.log(1.5) + math.log(3.0) + math.log(2.0))
    # k3 = r - log r - 1 per token: (1.5 - ln 1.5 - 1) + (3 - ln 3 - 1) + (0.5 + ln 2 - 1) + 0
    assert stats.kl == pytest.approx(0.5 - math.log(1.5) + 2 - math.log(3.0) - 0.5 + math.log(2.0))


def test_rescue_at_k_by_hand():
    # 1 win of 4 samples: one of 2 drawn wins with 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert rescue_at_k(False, 1, 4, 2) == pytest.approx(0.5)
    assert rescue_at_k(False, 1, 4, 1) == pytest.approx(0.25)  # pass@1: the share of wins
    assert rescue_at_k(False, 3, 4, 2) == 1.0  # only one loss: any two hold a win
    assert rescue_at_k(True, 3, 4, 2) == 0.0  # the greedy reply wins: nothing to rescue
    assert rescue_at_k(False, 0, 32, 32) == 0.0
    assert rescue_at_k(False, 2, 32, 8) == pytest.approx(1 - math.comb(30, 8) / math.comb(32, 8))
    with pytest.raises(ValueError):
        rescue_at_k(False, 1, 4, 8)


def test_bf16_changed_share_by_hand():
    before = {"w": torch.tensor([1.0, 1.0, 0.5, 2.0])}
    # bf16 ulp at 1 is 2^-7 = 0.0078125: 1.001 rounds back to 1, 1.004 up to 1.0078125; at 2 it is 0.015625, so
    # 2.02 rounds to 2.015625
    after = {"w": torch.tensor([1.001, 1.004, 0.5, 2.02])}
    assert bf16_changed_share(before, after) == 0.5


def test_fp32_master_weights_keep_updates_below_half_a_bf16_ulp():
    """SGD with lr 1 and gradient -0.001 on a bf16 weight at 1.0 (half an ulp: 0.0039): in place it rounds back to
    1.0 every step; with an fp32 master the master reaches 1.004 after 4 steps and the model then rounds up."""
    plain = torch.nn.Parameter(torch.ones(1, dtype=torch.bfloat16))
    opt = torch.optim.SGD([plain], lr=1.0)
    for _ in range(10):
        plain.grad = torch.full_like(plain, -0.001)
        opt.step()
    assert plain.item() == 1.0

    model = torch.nn.Parameter(torch.ones(1, dtype=torch.bfloat16))
    master = MasterWeights([model])
    opt = torch.optim.SGD(master.master, lr=1.0)
    seen = []
    for _ in range(5):
        model.grad = torch.full_like(model, -0.001)
        master.grads_to_master()
        opt.step()
        master.to_model()
        seen.append(model.item())
    assert seen == [1.0, 1.0, 1.0, 1.0078125, 1.0078125]
    # 5 steps of the bf16 gradient, -0.001 rounded to bf16 (-0.00099945)
    assert master.master[0].item() == pytest.approx(1 + 5 * 0.00099945, abs=1e-7)
