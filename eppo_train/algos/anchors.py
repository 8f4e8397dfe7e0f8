"""Anchors for tasks without signal: terms of the loss that hold a task where the policy gradient says nothing.

A batch's samples play one of three roles (`Sample.meta["role"]`):

- `policy` (the default): the policy-gradient loss (`algos/losses.py`) over the groups with reward variance;
- `anchor` (`algo.anchor_kl` > 0): the samples of groups without reward variance, which carry no policy gradient
  and were dropped (DAPO's filter) or only diluted the token mean. They train on
  `anchor_kl x sum_t k3(pi, pi_ref) / (anchor tokens in the mini-batch)`: the KL of the policy to the start
  model on the task's own current replies, so a task whose batch has no signal is pulled back where it drifted;
- `demo` (`algo.ptx_coef` > 0): SFT demonstrations replayed (InstructGPT's PPO-ptx, Ouyang et al. 2022): their
  token-mean negative log-likelihood, `ptx_coef x sum_t -log pi(y_t) / (demo tokens in the mini-batch)`.

Neither kind counts in the policy-gradient weights (so they do not dilute the token mean of the samples with
signal), and each term is normalised by its own tokens in the mini-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from eppo_train.algos.losses import k3
from eppo_train.core.records import ANCHOR, DEMO, ROLES


@dataclass
class AnchorTerms:
    loss: Tensor  # scalar: what the anchor and demo rows add to the mini-batch's loss
    anchor_per_token: Tensor  # [B, T] k3(pi, ref) on anchor tokens (0 elsewhere), detached, for the metrics
    demo_per_token: Tensor  # [B, T] -log pi on demo tokens (0 elsewhere), detached


def anchor_terms(logprobs: Tensor, ref_logprobs: Tensor | None, mask: Tensor, role: Tensor, anchor_kl: float,
                 ptx_coef: float, anchor_tokens: float, demo_tokens: float) -> AnchorTerms:
    """The anchor and demo terms of one micro-batch. `role`: [B] codes (index into ROLES); `anchor_tokens`,
    `demo_tokens`: those rows' tokens in the whole mini-batch (the normalisers, as the policy loss's weights)."""
    rows = role[:, None]
    anchor_mask = mask * (rows == ROLES.index(ANCHOR))
    demo_mask = mask * (rows == ROLES.index(DEMO))
    loss = logprobs.new_zeros(())
    anchor = logprobs.new_zeros(logprobs.shape)
    if ref_logprobs is not None and anchor_tokens > 0:
        anchor = k3(logprobs, ref_logprobs) * anchor_mask
        if anchor_kl > 0:
            loss = loss + anchor_kl * anchor.sum() / anchor_tokens
    demo = -logprobs * demo_mask
    if demo_tokens > 0 and ptx_coef > 0:
        loss = loss + ptx_coef * demo.sum() / demo_tokens
    return AnchorTerms(loss, anchor.detach(), demo.detach())
