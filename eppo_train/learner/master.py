"""fp32 master weights for a bf16 model's trained parameters, and how much of an update bf16 can see.

A bf16 weight has 8 significant bits: near |w| = 0.125 one ulp is 2^-10 ~ 9.8e-4, so an AdamW step of lr 1e-4 (its
per-weight change is about lr) rounds back to the same value unless the weight sits near a rounding boundary. A
bf16 model stepped in place loses those updates for good. With `learner.fp32_master`, AdamW steps float32 copies of
the trained parameters (their gradients cast up), and the model holds each copy's bf16 rounding: sub-ulp updates
accumulate in the copy and reach the model once they cross a boundary (mixed-precision training as Micikevicius et
al. 2018 and every FSDP/DeepSpeed mixed-precision policy do).

`bf16_changed_share` is the share of trained weights whose bf16 value a step changed: what a bf16 generator (vLLM's
bf16 weights, the learner's bf16 autocast) sees of the step. Logged every step as `bf16_changed_frac`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


class MasterWeights:
    """float32 copies of `params` that the optimizer steps; `to_model()` writes their rounding back."""

    def __init__(self, params: Sequence[torch.nn.Parameter]) -> None:
        self.params = list(params)
        self.master = [torch.nn.Parameter(p.detach().float().clone()) for p in self.params]

    def grads_to_master(self) -> None:
        """The model's gradients, cast to float32, as the copies' gradients (None stays None)."""
        for p, m in zip(self.params, self.master, strict=True):
            m.grad = None if p.grad is None else p.grad.detach().float()

    @torch.no_grad()
    def to_model(self) -> None:
        for p, m in zip(self.params, self.master, strict=True):
            p.copy_(m.to(p.dtype))

    def state_dict(self) -> list[torch.Tensor]:
        return [m.detach().cpu().clone() for m in self.master]

    @torch.no_grad()
    def load_state_dict(self, state: Sequence[torch.Tensor]) -> None:
        for m, value in zip(self.master, state, strict=True):
            m.copy_(value.to(m.device, m.dtype))


def bf16_changed_share(before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor]) -> float:
    """The share of elements whose bfloat16 rounding differs between `before` and `after` (same names)."""
    changed = total = 0
    for name, old in before.items():
        new = after[name]
        changed += int((old.to(torch.bfloat16) != new.to(torch.bfloat16)).sum())
        total += old.numel()
    return changed / max(total, 1)
