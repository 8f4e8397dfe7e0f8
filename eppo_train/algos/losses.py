"""Policy-gradient losses, registered by name: grpo, dapo, eppo, clip_cov, kl_cov.

Every loss is token-level PPO-style over a padded batch `[B, T]`. Clip bounds are per-token tensors, so a per-task
bound (EPPO) is just a tensor filled from the pacer. A loss returns the per-token loss; `aggregate` weights it
(token mean or sequence mean) with weights the learner computes over the *whole* mini-batch, so gradient
accumulation over micro-batches gives the same gradient as one big mini-batch (Clip-Cov and KL-Cov choose their
tokens within each micro-batch, as verl's recipe does).

References: GRPO (Shao et al. 2024), DAPO clip-higher and token-level mean (Yu et al. 2025), Clip-Cov and KL-Cov
(Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs"; their verl recipe is followed here).

A loss is one function plus one `register_loss(name, LossSpec(fn, ..., options=SomeDataclass))`: its settings
come from `algo.options` in the config, built into its own dataclass (unknown keys and bad values are one-line
config errors) and handed to the function as `LossInputs.options`. docs/design.md gives the formulas.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from eppo_train.core.registry import ConfigError, Registry, check_entry, setting


@dataclass
class LossInputs:
    logprobs: Tensor  # [B, T] log-prob of each token under the current policy (with grad)
    old_logprobs: Tensor  # [B, T] under the sampling policy
    advantages: Tensor  # [B, T] the sample's advantage broadcast over its tokens
    mask: Tensor  # [B, T] 1.0 on model tokens
    eps_low: Tensor  # [B, T] ratio may fall to 1 - eps_low
    eps_high: Tensor  # [B, T] ratio may rise to 1 + eps_high
    ref_logprobs: Tensor | None = None  # [B, T] under a frozen reference (only when kl_coef > 0)
    kl_coef: float = 0.0
    options: Any = None  # the loss's own options dataclass (LossSpec.options), built from algo.options
    generator: torch.Generator | None = None  # randomness of clip_cov's token choice (seeded: exact resume)


@dataclass
class LossOutput:
    per_token: Tensor  # [B, T] the loss of each token (0 off the mask); aggregate() reduces it
    clipped: Tensor  # [B, T] bool: tokens whose gradient the clip (or Clip-Cov) removed
    approx_kl: Tensor  # [B, T] k3 estimate of KL(old || new) per token, for logging


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def k3(logp: Tensor, logq: Tensor) -> Tensor:
    """Schulman's k3 estimator of KL(p || q) from samples of p: exp(q - p) - (q - p) - 1 (>= 0, unbiased)."""
    d = logq - logp
    return torch.exp(d) - d - 1.0


def ppo_clip(inp: LossInputs) -> LossOutput:
    """-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), plus kl_coef * k3(new, ref) when a reference is given."""
    ratio = torch.exp(inp.logprobs - inp.old_logprobs)
    unclipped = -inp.advantages * ratio
    clipped_ratio = torch.minimum(torch.maximum(ratio, 1.0 - inp.eps_low), 1.0 + inp.eps_high)
    clipped = -inp.advantages * clipped_ratio
    per_token = torch.maximum(unclipped, clipped)
    if inp.ref_logprobs is not None and inp.kl_coef > 0:
        per_token = per_token + inp.kl_coef * k3(inp.logprobs, inp.ref_logprobs)
    was_clipped = (clipped > unclipped) & (inp.mask > 0)
    return LossOutput(per_token * inp.mask, was_clipped, k3(inp.old_logprobs, inp.logprobs).detach() * inp.mask)


@dataclass
class ClipCovOptions:
    ratio: float = setting(2e-4, help="share of tokens detached")
    lb: float = setting(1.0, help="covariance window (lb, ub) of the candidate tokens")
    ub: float = setting(5.0, help="upper end of the covariance window (see lb)")

    def __post_init__(self) -> None:
        if not 0 < self.ratio <= 1:
            raise ConfigError(f"algo.options.ratio: a share of the tokens in (0, 1], got {self.ratio}")
        if not self.lb < self.ub:  # an empty window makes no token a candidate: clip_cov would silently be plain PPO
            raise ConfigError(f"algo.options: need lb < ub, got lb={self.lb}, ub={self.ub}")


@dataclass
class KlCovOptions:
    ratio: float = setting(2e-3, help="share of tokens penalised")
    coef: float = setting(1.0, help="weight of |log r| on them")

    def __post_init__(self) -> None:
        if not 0 < self.ratio <= 1:  # past 1 the top-k asks for more tokens than the batch has, mid-run
            raise ConfigError(f"algo.options.ratio: a share of the tokens in (0, 1], got {self.ratio}")
        if self.coef < 0:
            raise ConfigError(f"algo.options.coef: must be >= 0, got {self.coef}")


def clip_cov(inp: LossInputs) -> LossOutput:
    """PPO-clip, then detach the policy-gradient term of a random `ratio` share of the tokens whose centred
    covariance (A - mean A)(log pi - mean log pi) lies in (lb, ub): the high-covariance tokens drive entropy
    collapse. The KL penalty to the reference (kl_coef > 0) still acts on every token, the chosen ones too."""
    # the policy-gradient term alone: detaching a token must not also drop its KL penalty (verl adds that as a
    # separate loss, outside Clip-Cov's correction mask)
    out = ppo_clip(replace(inp, ref_logprobs=None))
    mask = inp.mask > 0
    adv_c = inp.advantages - _masked_mean(inp.advantages, inp.mask)
    lp = inp.logprobs.detach()
    cov = adv_c * (lp - _masked_mean(lp, inp.mask))
    opt: ClipCovOptions = inp.options or ClipCovOptions()
    lb, ub = opt.lb, opt.ub
    candidates = torch.nonzero((cov > lb) & (cov < ub) & mask & ~out.clipped)
    n = max(int(opt.ratio * int(mask.sum())), 1)
    if len(candidates) > 0:
        perm = torch.randperm(len(candidates), generator=inp.generator)[:n]
        chosen = candidates[perm.to(candidates.device)]
        keep = torch.ones_like(inp.mask)
        keep[chosen[:, 0], chosen[:, 1]] = 0.0
        out.per_token = out.per_token * keep  # no policy gradient through the chosen tokens
        out.clipped = out.clipped | (keep == 0)
    if inp.ref_logprobs is not None and inp.kl_coef > 0:
        out.per_token = out.per_token + inp.kl_coef * k3(inp.logprobs, inp.ref_logprobs) * inp.mask
    return out


def kl_cov(inp: LossInputs) -> LossOutput:
    """Unclipped policy gradient -r A, plus coef * |log r| on the top `ratio` share of tokens by
    centred covariance (A - mean A)(log pi - mean log pi)."""
    opt: KlCovOptions = inp.options or KlCovOptions()
    ratio = torch.exp(inp.logprobs - inp.old_logprobs)
    per_token = -inp.advantages * ratio
    mask = inp.mask > 0
    adv_c = inp.advantages - _masked_mean(inp.advantages, inp.mask)
    lp = inp.logprobs.detach()
    cov = (adv_c * (lp - _masked_mean(lp, inp.mask))).masked_fill(~mask, float("-inf"))
    n_valid = int(mask.sum())
    penalised = torch.zeros_like(mask)
    if n_valid > 0:
        k = max(1, int(n_valid * opt.ratio))
        top = torch.topk(cov.flatten(), k).indices
        penalised.view(-1)[top] = True
    per_token = per_token + opt.coef * (inp.logprobs - inp.old_logprobs).abs() * penalised
    if inp.ref_logprobs is not None and inp.kl_coef > 0:
        per_token = per_token + inp.kl_coef * k3(inp.logprobs, inp.ref_logprobs)
    return LossOutput(per_token * inp.mask, penalised & mask, k3(inp.old_logprobs, inp.logprobs).detach() * inp.mask)


@dataclass(frozen=True)
class LossSpec:
    fn: Callable[[LossInputs], LossOutput]
    eps_low: float
    eps_high: float
    agg: str  # token_mean | seq_mean
    paced: bool = False  # per-task bounds come from the entropy pacer
    description: str = ""
    options: type | None = None  # the dataclass of its `algo.options` (None: it takes none)


def token_weights(mask: Tensor, agg: str, total_tokens: float, total_seqs: float) -> Tensor:
    """Per-token weights so that sum(weights * per_token) over every micro-batch is the batch's loss.

    token_mean: each token 1 / (tokens in the batch). seq_mean: each token 1 / (its sequence's tokens x sequences).
    """
    if agg == "token_mean":
        return mask / max(total_tokens, 1.0)
    if agg == "seq_mean":
        return mask / mask.sum(dim=1, keepdim=True).clamp(min=1.0) / max(total_seqs, 1.0)
    raise ValueError(f"unknown loss aggregation {agg!r} (token_mean or seq_mean)")


def checked_output(name: str, out: object, like: Tensor) -> LossOutput:
    """A loss that returns something else than `LossOutput` of [B, T] tensors is one line naming the loss: unchecked,
    a tuple is an AttributeError inside the learner, a scalar `per_token` silently broadcasts over the batch's
    weights, and a detached one is a backward error."""
    if not isinstance(out, LossOutput):
        raise ConfigError(f"loss {name!r} returned {type(out).__name__}; return LossOutput(per_token, clipped, "
                          f"approx_kl), each a tensor of the batch's shape [B, T]")
    for part in ("per_token", "clipped", "approx_kl"):
        value = getattr(out, part)
        if not isinstance(value, Tensor) or value.shape != like.shape:
            got = f"shape {list(value.shape)}" if isinstance(value, Tensor) else type(value).__name__
            raise ConfigError(f"loss {name!r}: LossOutput.{part} is {got}; it must be a tensor of the batch's shape "
                              f"{list(like.shape)}")
    if like.requires_grad and not out.per_token.requires_grad:
        raise ConfigError(f"loss {name!r}: LossOutput.per_token carries no gradient; compute it from "
                          f"LossInputs.logprobs without .detach() or torch.no_grad()")
    return out


def aggregate(out: LossOutput, weights: Tensor) -> Tensor:
    return (out.per_token * weights).sum()


def _check_loss(name: str, spec: LossSpec) -> None:
    """A loss that cannot run is one line when it registers: the function takes one LossInputs, the bounds are
    in (0, 1), the aggregation is one `token_weights` knows."""
    form = f"register_loss({name!r}, ...)"
    check_entry(spec, LossSpec, form, "fn", 1)
    for bound in ("eps_low", "eps_high"):
        value = getattr(spec, bound)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
            raise ConfigError(f"{form}: LossSpec.{bound} must be a number in (0, 1), got {value!r}")
    try:  # the aggregations are token_weights' branches (config.LOSS_AGGS names them; this module cannot import it)
        token_weights(torch.ones(1, 1), spec.agg, 1.0, 1.0)
    except ValueError as exc:
        raise ConfigError(f"{form}: LossSpec.agg: {exc}") from None


LOSSES: Registry[LossSpec] = Registry("loss", "algo.name", "algo.options", check=_check_loss)
register_loss = LOSSES.register  # (name, LossSpec): selectable as algo.name=<name>, options as algo.options.<field>
loss_options = LOSSES.options  # (name, algo.options) -> the loss's options dataclass; ConfigError names a bad key


register_loss("grpo", LossSpec(ppo_clip, 0.2, 0.2, "seq_mean", description="PPO-clip, symmetric eps, optional KL"))
register_loss("dapo", LossSpec(ppo_clip, 0.2, 0.28, "token_mean", description="clip-higher, token-level mean"))
register_loss("eppo", LossSpec(ppo_clip, 0.2, 0.28, "token_mean", paced=True,
                               description="per-task bounds from the pacer"))
register_loss("clip_cov", LossSpec(clip_cov, 0.2, 0.28, "token_mean", options=ClipCovOptions,
                                   description="detach random high-covariance tokens"))
register_loss("kl_cov", LossSpec(kl_cov, 0.2, 0.28, "token_mean", options=KlCovOptions,
                                 description="KL penalty on top-k covariance tokens"))
