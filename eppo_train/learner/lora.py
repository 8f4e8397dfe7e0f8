"""LoRA through peft: adapters on the learner's model, and their merge into the generator's plain weights.

`attach(model, settings)` injects low-rank adapters into the target projections of the transformers model (in
place: the model keeps its class and its forward, each target `Linear` becomes a peft `lora.Linear` holding the
frozen `base_layer` and the trainable `lora_A`/`lora_B`) and returns the `PeftModel` wrapper that saves adapters.
Only the adapters train.

The generator holds a plain model. A weight sync sends the adapters (`AdapterUpdate`: r x (in + out) numbers per
projection) and, on the first sync only, the target projections' base weights; the generator side
(`AdapterMerger`) keeps those and loads W = W0 + (alpha / r) B A for every projection. So after the first
iteration a sync moves the adapters only, whatever the engine (vLLM's own LoRA path is not used: the merged weights
go through the same `update_weights` as a full fine-tune's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from eppo_train.config import LoraSettings

LORA_A, LORA_B, BASE = ".lora_A.default.weight", ".lora_B.default.weight", ".base_layer.weight"


def attach(model: torch.nn.Module, settings: LoraSettings):  # noqa: ANN201  (a peft PeftModel)
    """Adapters on `model`'s target projections (in place); every other weight frozen."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=list(settings.target_modules), bias="none")
    return get_peft_model(model, config)


def scaling(settings: LoraSettings) -> float:
    return settings.alpha / settings.r


@dataclass
class AdapterUpdate:
    """What a LoRA weight sync sends: each adapted projection's (A, B) by its plain module name, their scale, and
    on the first sync the projections' base weights (by plain weight name)."""

    adapters: dict[str, tuple[torch.Tensor, torch.Tensor]]
    scale: float
    base: dict[str, torch.Tensor] = field(default_factory=dict)

    def nbytes(self) -> int:
        tensors = [t for pair in self.adapters.values() for t in pair] + list(self.base.values())
        return sum(t.numel() * t.element_size() for t in tensors)


def adapter_update(trainable: Mapping[str, torch.Tensor], scale: float,
                   base: Mapping[str, torch.Tensor] | None = None) -> AdapterUpdate:
    """`trainable` (the learner's adapter tensors, by their names in the adapted model) as an update."""
    adapters = {}
    for name, a in trainable.items():
        if name.endswith(LORA_A):
            module = name[: -len(LORA_A)]
            adapters[module] = (a, trainable[module + LORA_B])
    return AdapterUpdate(adapters, scale, dict(base or {}))


def base_weights(named: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapted projections' frozen weights by their plain names (`...q_proj.weight`)."""
    return {name[: -len(BASE)] + ".weight": t for name, t in named.items() if name.endswith(BASE)}


def delta(a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    """(alpha / r) B A, in float32 (peft's `get_delta_weight` for a Linear that is not fan-in-fan-out)."""
    return (b.float() @ a.float()) * scale


class AdapterMerger:
    """The generator's side of a LoRA sync: keeps the base weights of the adapted projections (sent once) and
    turns each update into the plain weights an engine loads."""

    def __init__(self) -> None:
        self.base: dict[str, torch.Tensor] = {}

    def __call__(self, update: AdapterUpdate) -> dict[str, torch.Tensor]:
        self.base.update(update.base)
        out = {}
        for module, (a, b) in update.adapters.items():
            w0 = self.base.get(module + ".weight")
            if w0 is None:
                raise RuntimeError(f"LoRA sync: no base weight for {module} (the first sync sends them)")
            out[module + ".weight"] = (w0.float() + delta(a, b, update.scale)).to(w0.dtype)
        return out


def merged_state_dict(state: Mapping[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """The adapted model's whole state dict (its own names) as a plain model's: adapters merged into their base
    weights, peft's `base_layer` level gone. What a checkpoint's `model/` folder holds for evaluation."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if ".lora_A." in name or ".lora_B." in name:
            continue
        if name.endswith(BASE):
            module = name[: -len(BASE)]
            out[module + ".weight"] = (t.float() + delta(state[module + LORA_A], state[module + LORA_B],
                                                         scale)).to(t.dtype)
        else:
            out[name.replace(".base_layer.", ".")] = t
    return out
