"""The sampling distribution as the sampler draws from it, for the learner's log-probs (docs/design.md).

The rollout samples from `softmax(z / T)` cut by min-p and top-p; vLLM (`logprobs_mode="processed_logprobs"`) and
HFPolicy return each sampled token's log-prob under that cut, renormalised distribution. The learner recomputes the
same quantity with `processed_logprobs`, in the same order as vLLM's sampler:

1. temperature: `z / T` (the caller divides);
2. min-p: keep the tokens whose probability is at least `min_p x` the largest (vLLM's `MinPLogitsProcessor`,
   transformers' `MinPLogitsWarper`);
3. top-p on what is left, renormalised: sort ascending, drop the tokens whose cumulative probability is `<= 1 -
   top_p`, the most likely token always kept (vLLM's `apply_top_k_top_p_pytorch`, transformers'
   `TopPLogitsWarper`);
4. the log-prob of the target token under the softmax over the kept tokens.

The target token is always kept: the sampler drew it from its own cut, and the learner's cut (other weights, other
numerics) may leave it just outside; without it the log-prob would be -inf. The cut is chosen without gradient
(it is a discrete choice); the gradient flows through the logits of the kept tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _as_column(value: float | Tensor, like: Tensor) -> Tensor:
    """A scalar or a [N] tensor as an [N, 1] column on `like`'s device."""
    if isinstance(value, Tensor):
        return value.to(device=like.device, dtype=like.dtype).reshape(-1, 1)
    return torch.full((like.shape[0], 1), float(value), device=like.device, dtype=like.dtype)


def _cuts(value: float | Tensor, off: float) -> bool:
    """Whether any row's value cuts the distribution (top-p below 1, min-p above 0)."""
    if isinstance(value, Tensor):
        return bool((value != off).any())
    return value != off


def kept_tokens(logits: Tensor, top_p: float | Tensor = 1.0, min_p: float | Tensor = 0.0) -> Tensor:
    """[N, V] bool: the tokens min-p and then top-p keep, per row, from tempered logits [N, V]."""
    z = logits.detach().float()
    keep = torch.ones_like(z, dtype=torch.bool)
    if _cuts(min_p, 0.0):
        probs = torch.softmax(z, dim=-1)
        keep &= probs >= _as_column(min_p, z) * probs.amax(dim=-1, keepdim=True)
    if _cuts(top_p, 1.0):
        masked = z.masked_fill(~keep, float("-inf"))
        sorted_z, order = masked.sort(dim=-1, descending=False)
        cumulative = torch.softmax(sorted_z, dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1.0 - _as_column(top_p, z)
        drop[:, -1] = False  # the most likely token stays
        keep &= ~torch.zeros_like(drop).scatter(1, order, drop)
    return keep


def processed_logprobs(logits: Tensor, targets: Tensor, top_p: float | Tensor = 1.0,
                       min_p: float | Tensor = 0.0) -> Tensor:
    """[N] log-prob of `targets` [N] under the min-p/top-p cut, renormalised distribution of tempered `logits`
    [N, V] (float32); with neither cut, the plain log-softmax."""
    picked = logits.gather(1, targets[:, None]).squeeze(1)
    if not (_cuts(top_p, 1.0) or _cuts(min_p, 0.0)):
        return picked - torch.logsumexp(logits, dim=-1)
    keep = kept_tokens(logits, top_p, min_p)
    keep[torch.arange(len(targets), device=keep.device), targets] = True
    return picked - torch.logsumexp(logits.masked_fill(~keep, float("-inf")), dim=-1)
