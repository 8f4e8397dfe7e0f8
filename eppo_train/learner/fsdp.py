"""The model sharded over the learner ranks with PyTorch FSDP2 (`fully_shard`), and its weights read as a whole.

Each decoder block is its own FSDP unit (its parameters are gathered just before it runs and freed after), the root
unit holds the embeddings, the final norm and the head. On CUDA (and on a CPU with native bf16 when
`learner.bf16_autocast_cpu` asks) blocks compute in bf16 from fp32 master weights and gradients reduce in fp32; on
other CPUs everything stays fp32. Gradients are summed over ranks, not averaged: the learner weights every token by
the global batch (`token_weights` over the whole mini-batch), so the sum is the single-process gradient.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from eppo_train.learner.frozen_cache import decoder_layers


def checkpoint_blocks(model: torch.nn.Module) -> None:
    """Activation checkpointing per decoder block: a block's activations are recomputed in backward instead of
    kept (memory ~ one block's activations plus each block's input, for ~1/3 more compute)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def shard_model(root: torch.nn.Module, model: torch.nn.Module, bf16: bool) -> torch.nn.Module:
    """`fully_shard` every decoder block of the transformers `model`, then `root` (which holds `model`: its own
    parameters are the rest), over the default process group, in place."""
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else \
        MixedPrecisionPolicy()
    blocks = list(decoder_layers(model))
    for block in blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(root, mp_policy=policy)
    # gloo has no PREMUL_SUM and the loss is already normalised by the global batch: a plain sum is the gradient
    for unit in (root, *blocks):
        assert isinstance(unit, FSDPModule)
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)
    return root


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a parameter (the tensor itself when unsharded)."""
    return t.to_local() if isinstance(t, DTensor) else t


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor (a collective when sharded: every rank calls it in the same order)."""
    return t.full_tensor() if isinstance(t, DTensor) else t


def full_from_local(param: torch.Tensor, shard: torch.Tensor) -> torch.Tensor:
    """The whole tensor whose shard on this rank is `shard`, laid out as `param` (a collective when sharded)."""
    if not isinstance(param, DTensor):
        return shard
    dt = DTensor.from_local(shard.to(param.to_local().device), param.device_mesh, param.placements,
                            shape=param.shape, stride=param.stride())
    return dt.full_tensor()


def shard_of(param: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
    """This rank's shard of `whole` laid out as `param` (no communication: every rank holds `whole`)."""
    if not isinstance(param, DTensor):
        return whole
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(whole.to(param.to_local().device), param.device_mesh, param.placements,
                             src_data_rank=None).to_local()


def copy_local(params: Mapping[str, torch.Tensor], values: Mapping[str, torch.Tensor]) -> None:
    """Copy `values` (local shards, or whole tensors when unsharded) into the parameters' local shards."""
    for name, value in values.items():
        target = local(params[name])
        target.copy_(value.to(target.device, target.dtype))
