"""The learner's process group: which rank this process is, the reductions a step needs, how a batch is split.

At world size 1 (`Single`) every reduction is the identity and nothing touches `torch.distributed`, so the
single-process learner runs exactly as before. At world size N (`Group`) every rank runs the same `train_step` on
the same batch and plan (the same seeded shuffle), takes its own share of each mini-batch (`split_by_tokens`) and
sums what it measured (tokens, entropy sums, clip counts, ratio sums, the loss) with the others before any ratio is
formed: world size 2 reports the numbers world size 1 does on the same batch, and every rank's pacer sees the global
per-task entropies. Gloo on CPU, NCCL on CUDA.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist


class Single:
    """World size 1: this process holds the whole model and the whole batch."""

    rank = 0
    world = 1
    sharded = False  # a Group shards the model with FSDP2 at any world size (the GPU check's one GPU too)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """The element-wise sum over ranks (in place where a group reduces)."""
        return values

    def max(self, values: torch.Tensor) -> torch.Tensor:
        return values

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order."""
        return [obj]

    def barrier(self) -> None:
        pass

    def close(self) -> None:
        pass


class Group(Single):
    """Rank `rank` of `world` learner processes joined at `address` (tcp://host:port)."""

    sharded = True

    def __init__(self, rank: int, world: int, address: str, backend: str | None = None,
                 timeout_s: float = 1800.0) -> None:
        self.rank, self.world = rank, world
        self.backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if self.backend == "nccl":
            torch.cuda.set_device(torch.cuda.current_device())
        if not dist.is_initialized():
            dist.init_process_group(self.backend, init_method=address, rank=rank, world_size=world,
                                    timeout=timedelta(seconds=timeout_s))
        # NCCL reduces device tensors only; gloo host tensors
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else None

    def _reduce(self, values: torch.Tensor, op: dist.ReduceOp) -> torch.Tensor:
        moved = values.to(self.device) if self.device is not None else values
        dist.all_reduce(moved, op=op)
        if moved is not values:
            values.copy_(moved.to(values.device))
        return values

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        return self._reduce(values, dist.ReduceOp.SUM)

    def max(self, values: torch.Tensor) -> torch.Tensor:
        return self._reduce(values, dist.ReduceOp.MAX)

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def free_address(host: str = "127.0.0.1") -> str:
    """A tcp:// rendezvous address on `host` with a port free now (rank 0's node picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return f"tcp://{host}:{s.getsockname()[1]}"


def split_by_tokens(lengths: Sequence[int], rows: Sequence[int], world: int) -> list[list[int]]:
    """`rows` (positions into `lengths`) shared out over `world` ranks with near-equal token counts: longest first,
    each to the rank holding the fewest tokens so far (the lowest rank on a tie). Deterministic, so every rank
    computes the same split without asking the others; each share keeps the rows' original order."""
    load = [0] * world
    owner: dict[int, int] = {}
    for i in sorted(rows, key=lambda i: (-lengths[i], i)):
        r = min(range(world), key=lambda k: (load[k], k))
        owner[i] = r
        load[r] += lengths[i]
    return [[i for i in rows if owner[i] == r] for r in range(world)]
