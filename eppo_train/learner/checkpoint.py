"""Checkpoints of a sharded or LoRA learner: `torch.distributed.checkpoint` (DCP) for the model and the optimizer,
and a gathered transformers folder for evaluation.

A checkpoint folder then holds
  dcp/          the model and AdamW state by parameter name, one file per rank that wrote it: it loads at any world
                size (1 included: DCP reshards on load), since `get_state_dict` names every tensor by its place in
                the model, never by a rank's shard;
  model/        the whole model as a transformers folder (adapters merged in), what `eppo-eval`, the pipeline's
                next stage and the generator load;
  adapter/      with LoRA, peft's adapter folder (`PeftModel.from_pretrained(base, adapter/)`);
  learner.pt    step, pacer, RNG states and the staleness history (whole tensors), as the single-process format.
Every rank calls `save` and `load` (the gathers and DCP are collectives); rank 0 writes the single files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from eppo_train.learner.lora import merged_state_dict


def is_sharded_checkpoint(path: Path) -> bool:
    return (path / "dcp" / ".metadata").is_file()


def save_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: Path) -> None:
    """The model's and optimizer's state under `path/dcp` (each rank writes its shards)."""
    msd, osd = get_state_dict(model, optimizer)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(path / "dcp"))


def load_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: Path) -> None:
    """`save_state`'s folder into this model and optimizer, whatever world size wrote it."""
    msd, osd = get_state_dict(model, optimizer)  # the layout to fill (the optimizer's state initialised)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=str(path / "dcp"))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole state dict on CPU in rank 0 ({} on the others): a collective when sharded."""
    if not dist.is_initialized():
        return {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def export_model(model: torch.nn.Module, path: Path, rank: int, lora_scale: float | None = None,
                 adapted: Any = None) -> None:
    """`path/model` as a transformers folder (and `path/adapter` with LoRA), written by rank 0."""
    state = full_state(model)
    if rank != 0:
        return
    if lora_scale is not None:
        from peft.utils import get_peft_model_state_dict

        (path / "adapter").mkdir(parents=True, exist_ok=True)
        adapter = get_peft_model_state_dict(adapted, state_dict={f"base_model.model.{k}": v for k, v in state.items()})
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in adapter.items()}, str(path / "adapter" / "adapter_model.safetensors"))
        adapted.peft_config["default"].save_pretrained(str(path / "adapter"))
        state = merged_state_dict(state, lora_scale)
    plain = {k: v.contiguous() for k, v in state.items()}
    # drop the tied copy (the head shares the embeddings): save_pretrained refuses two names for one storage
    if getattr(model.config, "tie_word_embeddings", False):
        plain.pop("lm_head.weight", None)
    _save_pretrained(model, plain, path / "model")


def _save_pretrained(model: torch.nn.Module, state: dict[str, torch.Tensor], folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = model.config
    config.save_pretrained(str(folder))
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(str(folder))
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
