"""Rollout correction: the sampler and the learner disagree, measured and (optionally) corrected per token.

The sampler (vLLM or HFPolicy, bf16 weights, its own kernels) records each sampled token's log-prob `log q`; the
learner recomputes it with its own model on the same weights, `log p` (pass 1 of `Learner.train_step`). The PPO
ratio is taken against `p`, so the learner's steps are on-policy for its own numerics; the tokens were drawn from
`q`, so the gradient is biased by `p / q`. Truncated importance sampling (TIS; Yao et al. 2025, verl's rollout
correction) weights each token's policy-gradient term by

    w = min(exp(log p - log q), C)

(detached): the bias is corrected where `p < q C`, and the rare token the sampler liked far less than the learner
cannot blow up the step. The learner applies `w` by scaling the token's advantage: for the PPO-clip family,
`-min(r w A, clip(r) w A) = w x -min(r A, clip(r) A)` since `w >= 0`, so it weights the policy-gradient term and
leaves the KL penalty unweighted, as verl does. Logged whether or not it is applied, per task: `mismatch_abs` (mean
`|log p - log q|` over the task's tokens), `mismatch_kl` (mean k3 estimate of KL(q || p), from the sampler's
draws) and `is_clip_frac` (the share of tokens with `p / q > C`).

With `learner.staleness` = k the generator samples with the weights of k steps ago and pass 1 runs with those same
weights, so `p / q` measures only the two engines' disagreement on one set of weights, and the PPO ratio
`pi_theta / p` the policy's movement since sampling; the two multiply, each bounded by its own clip.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Mismatch:
    """Sums over one sample's tokens (divide by `tokens` for the means)."""

    tokens: float
    abs_diff: float  # sum of |log p - log q|
    kl: float  # sum of k3(q, p) = exp(log p - log q) - (log p - log q) - 1
    clipped: float  # tokens with p / q > cap


def truncated_weights(learner: Tensor, sampler: Tensor, mask: Tensor, cap: float) -> tuple[Tensor, Mismatch]:
    """Per-token weights `min(exp(learner - sampler), cap)` on `mask` (1 elsewhere), and the mismatch sums.

    `learner`, `sampler`, `mask`: one sample's [T] log-probs and loss mask."""
    on = mask > 0
    diff = (learner - sampler).masked_fill(~on, 0.0)
    ratio = torch.exp(diff)
    weights = torch.where(on, ratio.clamp(max=cap), torch.ones_like(ratio))
    kl = (ratio - diff - 1.0).masked_fill(~on, 0.0)
    stats = Mismatch(float(on.sum()), float(diff.abs().sum()), float(kl.sum()), float(((ratio > cap) & on).sum()))
    return weights, stats
