"""The learner's recipe tools on the tiny random model, each against a loss or metric computed by hand: truncated
importance sampling (rollout correction), the sampler's top-p/min-p in the recomputed log-probs, per-task loss
weights, the anchor (KL to the start model on groups without signal) and PPO-ptx demonstrations, fp32 master
weights."""

import math
import random

import pytest
import torch

from eppo_train.config import load_config
from eppo_train.core.records import Sample
from eppo_train.learner.learner import Learner, token_logprobs_entropy
from eppo_train.policy.base import SamplingParams
from eppo_train.policy.models import load_model


@pytest.fixture(scope="module")
def model_path():
    from eppo_train.policy.models import tiny_model_dir

    return str(tiny_model_dir())


def cfg_for(*sets):
    return load_config("tiny", ["learner.lr=1e-2", "pacing.warmup=0", "algo.name=dapo", *sets])


def batch(n=4, task="a", seed=0, advantage=1.0, meta=None):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, r = rng.randint(3, 6), rng.randint(3, 6)
        ids = [rng.randint(10, 4000) for _ in range(p + r)]
        out.append(Sample(task, f"{task}{seed}-g{i}", f"{task}{seed}-e{i}", -1, ids, [0] * p + [1] * r,
                          [0.0] * (p + r), 1.0, advantage=advantage, meta=dict(meta or {})))
    return out


def learner_logprobs(model_path, samples, temperature=1.0):
    """Each sample's log-probs under the start model (the learner's own numbers: fp32 on CPU)."""
    model = load_model(model_path)
    out = []
    for s in samples:
        ids = torch.tensor([s.input_ids])
        mask = torch.tensor([s.loss_mask], dtype=torch.float32)
        mask[:, 0] = 0
        with torch.no_grad():
            lp, _ = token_logprobs_entropy(model, ids, torch.ones_like(ids), mask, temperature)
        out.append(lp[0])
    return out


def response_tokens(samples):
    return sum(s.num_response_tokens for s in samples)


def test_truncated_importance_sampling_scales_each_tokens_advantage(model_path):
    """The sampler's log-probs sit below the learner's by ln 3 on each reply's first token (weight capped at C = 2)
    and by ln 1.5 on the others: with A = 1 and the first step's ratio of 1, the token-mean loss is -mean(w)."""
    samples = batch()
    lps = learner_logprobs(model_path, samples)
    first = 0
    for s, lp in zip(samples, lps, strict=True):
        start = s.loss_mask.index(1)
        shift = [0.0] * len(s.input_ids)
        for t in range(start, len(s.input_ids)):
            shift[t] = math.log(3.0) if t == start else math.log(1.5)
        s.old_logprobs = [float(lp[t]) - shift[t] for t in range(len(s.input_ids))]
        first += 1
    n = response_tokens(samples)
    want = -(2.0 * first + 1.5 * (n - first)) / n
    corrected = Learner(cfg_for("learner.rollout_correction=tis", "learner.tis_cap=2.0")).train_step(samples)
    assert corrected.metrics["loss"] == pytest.approx(want, abs=1e-5)
    assert corrected.per_task["a"]["is_clip_frac"] == pytest.approx(first / n)
    assert corrected.per_task["a"]["mismatch_abs"] == pytest.approx(
        (first * math.log(3.0) + (n - first) * math.log(1.5)) / n, abs=1e-5)
    plain = Learner(cfg_for()).train_step(samples)  # measured, not applied
    assert plain.metrics["loss"] == pytest.approx(-1.0, abs=1e-6)
    assert plain.metrics["mismatch_abs"] == pytest.approx(corrected.metrics["mismatch_abs"])


def test_an_expert_member_is_not_corrected(model_path):
    """Expert-guided members have no sampler log-probs (0): they get weight 1, and stay out of the mismatch."""
    samples = batch(meta={"behaviour": "expert"})
    report = Learner(cfg_for("learner.rollout_correction=tis")).train_step(samples)
    assert report.metrics["loss"] == pytest.approx(-1.0, abs=1e-6) and "mismatch_abs" not in report.metrics


def test_the_learner_recomputes_the_samplers_top_p_and_min_p_distribution(model_path):
    """HFPolicy samples at T 1.3 with top-p 0.7 (and min-p 0.1): the learner's log-probs, recomputed under the
    sample's recorded settings, equal the sampler's; under the plain tempered softmax they would not."""
    from eppo_train.policy.hf import HFPolicy
    from eppo_train.policy.models import load_tokenizer

    policy = HFPolicy(model_path, tokenizer=load_tokenizer(model_path), device="cpu")
    samples = []
    for k, (top_p, min_p) in enumerate(((0.7, 0.0), (1.0, 0.1), (0.8, 0.05))):
        prompt = [random.Random(k).randint(10, 4000) for _ in range(5)]
        gen = policy.generate([prompt], SamplingParams(12, 1.3, top_p, seed=k, min_p=min_p))[0]
        ids = prompt + gen.token_ids
        samples.append(Sample("a", f"g{k}", f"e{k}", -1, ids, [0] * 5 + [1] * len(gen.token_ids),
                              [0.0] * 5 + gen.logprobs, 1.0, advantage=1.0,
                              meta={"sampling": [1.3, top_p, min_p]}))
    report = Learner(cfg_for()).train_step(samples)
    assert report.per_task["a"]["mismatch_abs"] < 1e-4, report.per_task["a"]
    untruncated = [Sample(**{**vars(s), "meta": {"sampling": [1.3, 1.0, 0.0]}}) for s in samples]
    assert Learner(cfg_for()).train_step(untruncated).per_task["a"]["mismatch_abs"] > 0.05


def test_per_task_loss_weight(model_path):
    """Task a at weight 0.5 beside task b at 1, A = 1 everywhere: -(0.5 n_a + n_b) / (n_a + n_b)."""
    a = batch(task="a", meta={"loss_weight": 0.5})
    b = batch(task="b", seed=1)
    n_a, n_b = response_tokens(a), response_tokens(b)
    report = Learner(cfg_for()).train_step(a + b)
    assert report.metrics["loss"] == pytest.approx(-(0.5 * n_a + n_b) / (n_a + n_b), abs=1e-6)


def test_anchor_rows_stay_out_of_the_policy_loss_and_pull_towards_the_start_model(model_path):
    """Anchor rows (groups without variance) add anchor_kl x KL(pi || start) over their own tokens, 0 at the start
    model: the first step's loss is the policy rows' -1, not -n_p / (n_p + n_anchor) as rows of advantage 0 give."""
    policy = batch()
    anchor = batch(task="b", seed=1, advantage=0.0, meta={"role": "anchor"})
    report = Learner(cfg_for("algo.anchor_kl=0.5")).train_step(policy + anchor)
    assert report.metrics["loss"] == pytest.approx(-1.0, abs=1e-6)
    assert report.per_task["b"]["anchor_kl"] == pytest.approx(0.0, abs=1e-7)
    assert report.per_task["b"]["anchor_tokens"] == response_tokens(anchor)
    diluted = Learner(cfg_for()).train_step(policy + [Sample(**{**vars(s), "meta": {}}) for s in anchor])
    n_p, n_a = response_tokens(policy), response_tokens(anchor)
    assert diluted.metrics["loss"] == pytest.approx(-n_p / (n_p + n_a), abs=1e-6)
    # two epochs: the second sees a moved policy, so the anchor has a KL to report
    moved = Learner(cfg_for("algo.anchor_kl=0.5", "learner.epochs=2")).train_step(policy + anchor)
    assert moved.per_task["b"]["anchor_kl"] > 0


def test_ptx_adds_the_demonstrations_token_mean_nll(model_path):
    """Demo rows add ptx_coef x their token-mean NLL under the untempered model: -1 + 0.5 x NLL on the first step."""
    policy = batch()
    demos = batch(task="b", seed=2, advantage=0.0, meta={"role": "demo", "sampling": [1.0, 1.0, 0.0]})
    lps = learner_logprobs(model_path, demos)
    nll = -sum(float(lp.sum()) for lp in lps) / response_tokens(demos)
    cfg = cfg_for("algo.ptx_coef=0.5", "rollout.temperature=0.7")  # the demos' log-probs stay untempered
    report = Learner(cfg).train_step(policy + demos)
    assert report.metrics["loss"] == pytest.approx(-1.0 + 0.5 * nll, abs=1e-5)
    assert report.per_task["b"]["ptx_nll"] == pytest.approx(nll, abs=1e-5)


def test_fp32_master_weights_for_a_bf16_model(model_path):
    """model.dtype bfloat16 with fp32_master: AdamW steps float32 copies and the model holds their rounding; the
    share of weights whose bf16 value changed is logged. Without the masters, a bf16 model at lr 1e-5 barely moves
    (AdamW's step of ~lr is below half a bf16 ulp for all but the smallest weights)."""
    sets = ("model.dtype=bfloat16", "learner.lr=1e-5", "learner.train_top_layers=1")
    plain, kept = Learner(cfg_for(*sets)), Learner(cfg_for(*sets, "learner.fp32_master=true"))
    assert plain.master is None and kept.master is not None
    assert all(m.dtype == torch.float32 for m in kept.master.master)
    start = kept.trainable_weights()
    for _ in range(3):
        r_plain = plain.train_step(batch())
        r_kept = kept.train_step(batch())
    for p, m in zip(kept.master.params, kept.master.master, strict=True):
        assert torch.equal(p.detach(), m.detach().to(torch.bfloat16))
    moved = sum(int((kept.master.master[i].detach() != start[n].float()).sum())
                for i, n in enumerate(start)) / sum(v.numel() for v in start.values())
    assert moved > 0.5, "the float32 copies take every step"
    assert 0 <= r_plain.metrics["bf16_changed_frac"] <= r_kept.metrics["bf16_changed_frac"] + 0.05
    assert 0 < r_kept.metrics["bf16_changed_frac"] < moved
