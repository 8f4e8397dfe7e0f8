"""Where the generators and the learner run: in this process, or as Ray actors beside the env workers.

The trainer only sees `Workers`: `.policy` (a `PolicyBackend` the rollout samples from), `train(samples)`,
`sync_weights()` (learner -> generator, every iteration), `save`/`load` (checkpoints) and `close`. In Ray mode
`.policy` is a thin proxy whose `generate` calls the generator actor (with `generator.engines` = N, an
`EngineGroup` over N of them), so `run_rollout` is the same code either way. With `learner.world_size` = N the
learner is N rank actors in one process group (`LearnerRanks`: FSDP2, learner/fsdp.py); each gets the batch from the
object store and rank 0 answers.

Weights travel learner rank 0 -> object store -> generators without passing through the driver: the rank puts
them once and every engine gets the reference, so Ray moves them once to each node and the engines there read the
node's copy. With LoRA only the adapters travel (the base projections once, on the first sync; learner/lora.py).
Each sync's bytes and seconds are in the metrics (`weight_sync_bytes`, `weight_sync_s`).

On a cluster nothing assumes a shared filesystem: a model given as a folder on the driver travels to the actors
through the object store (each writes it to a node-local temp folder), and checkpoints come back the same way into
the driver's run directory. Placement follows `ray.*` resources (docs/cluster.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from eppo_envs.tools.teardown.owner import owned_prefix
from eppo_train.config import Config, from_dict, to_dict
from eppo_train.core.records import Sample
from eppo_train.learner.distributed import Group, free_address
from eppo_train.learner.learner import Learner, StepReport
from eppo_train.learner.lora import AdapterMerger, AdapterUpdate, adapter_update, scaling
from eppo_train.policy.base import Generation, PolicyBackend, SamplingParams
from eppo_train.policy.engine import EngineGroup, EngineSpec, make_engine
from eppo_train.policy.models import (
    DEFAULT_ALIASES,
    TINY_MODEL_NAME,
    check_model,
    load_tokenizer,
    resolve_model,
)
from eppo_train.report.memory import cuda_peaks, release
from eppo_train.runtime.ray_cluster import check_resources, lost, wire_bytes

if TYPE_CHECKING:
    from ray.actor import ActorHandle
    from transformers import PreTrainedTokenizerBase

    from eppo_train.rollout.env_pool import EnvPool


def _threads(n: int | None) -> None:
    # Ray pins OMP threads to an actor's CPU share; generation and learning alternate, so each may use every core.
    torch.set_num_threads(max(1, n or os.cpu_count() or 1))


def folder_files(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file under `path`, by relative path: a model or checkpoint folder as one object-store value."""
    root = Path(path)
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


def write_files(files: Mapping[str, bytes], dest: str | os.PathLike[str]) -> Path:
    root = Path(dest)
    for rel, data in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


@contextmanager
def _node_local(files: Mapping[str, bytes] | None, prefix: str) -> Iterator[str | None]:
    """Shipped files in a fresh node-local folder while a model loads from it (None when nothing was shipped).

    The folder goes when the block ends: nothing reads it once the model is loaded, and an actor ends by `ray.kill`,
    which runs none of its clean-up (left there, every run would keep a copy of the model per actor in /tmp)."""
    if files is None:
        yield None
        return
    folder = tempfile.mkdtemp(prefix=owned_prefix(prefix))  # an actor killed while loading: the watchdog's to remove
    try:
        yield str(write_files(files, folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def engine_spec(cfg: Config) -> EngineSpec:
    """The generation engine a run samples with (`model.backend`, its dtype, the sequence limit)."""
    m = cfg.model
    episodes = sum(t.problems for t in cfg.env.tasks) * cfg.rollout.group_size  # one RL iteration's batch
    return EngineSpec(m.name, m.backend, m.generator_dtype, max(cfg.rollout.max_total_tokens, 256), cfg.run.seed,
                      None if m.kv_cache_gb == "auto" else float(m.kv_cache_gb),
                      max_sequences=max(episodes, cfg.evaluation.batch_size),
                      tensor_parallel_size=cfg.generator.tensor_parallel_size)


class GeneratorWorker:
    """Hosts the sampling copy of the model: a vLLM engine or an HFPolicy (`model.backend`)."""

    def __init__(self, spec: EngineSpec, threads: int | None = None,
                 model_files: Mapping[str, bytes] | None = None) -> None:
        _threads(threads)
        with _node_local(model_files, "eppo-gen-model-") as local:
            self.policy = make_engine(replace(spec, model=local) if local else spec)
        self.merger = AdapterMerger()

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams,
                 budgets: Sequence[int] | None = None) -> list[Generation]:
        return self.policy.generate(prompts, params, budgets=budgets)

    def update_weights(self, state: Mapping[str, torch.Tensor] | AdapterUpdate) -> int:
        """Load the learner's tensors (vLLM passes them on through a node-local file), or LoRA adapters merged into
        the base projections here; returns the bytes that came."""
        return load_update(self.policy, self.merger, state)

    def node_id(self) -> str:
        return _node_id()

    def close(self) -> None:
        """Stop the engine (vLLM's engine-core process) before the actor goes."""
        self.policy.close()


def load_update(policy: PolicyBackend, merger: AdapterMerger, state: Mapping[str, torch.Tensor] | AdapterUpdate) -> int:
    """`state` into `policy` (LoRA adapters merged into the base weights `merger` keeps); the bytes that came."""
    if isinstance(state, AdapterUpdate):
        policy.update_weights(merger(state))
        return state.nbytes()
    policy.update_weights(state)
    return sum(t.numel() * t.element_size() for t in state.values())


class LearnerWorker:
    """Hosts the Learner; takes plain config data so that it pickles into an actor without surprises. As one rank
    of `world` (`LearnerRank`), the Learner is built by `start(address)` once every rank's actor is placed."""

    def __init__(self, cfg_data: dict, threads: int | None = None,
                 model_files: Mapping[str, bytes] | None = None) -> None:
        _threads(threads)
        self._base_sent = False
        self._start(cfg_data, model_files, None)

    def _start(self, cfg_data: dict, model_files: Mapping[str, bytes] | None, group: Group | None) -> None:
        with _node_local(model_files, "eppo-learner-model-") as local:
            if local:
                cfg_data = {**cfg_data, "model": {**cfg_data["model"], "name": local}}
            self.learner = Learner(from_dict(cfg_data), group=group)

    def train_step(self, samples: list[Sample]) -> StepReport:
        cuda_peaks("learner")  # the step's own peaks from here
        report = self.learner.train_step(samples)
        release()  # the step's activations and cached states back to the system, in whichever process learns
        report.metrics.update(cuda_peaks("learner"))
        return report

    def weights(self) -> dict[str, torch.Tensor] | AdapterUpdate | None:
        """What the generator samples the next batch with (learner.staleness: possibly older than the learner's);
        with LoRA the adapters (and on the first call the base projections they merge into). Every rank joins
        (the gather is a collective); ranks other than 0 return None."""
        state = self.learner.sampling_weights()
        if self.learner.adapted is not None:
            base = None if self._base_sent else self.learner.lora_base()
            self._base_sent = True
            state = adapter_update(state, scaling(self.learner.cfg.learner.lora), base)
        return state if self.learner.group.rank == 0 else None

    def save(self, path: str) -> None:
        self.learner.save(Path(path))

    def load(self, path: str) -> int:
        self.learner.load(Path(path))
        return self.learner.step

    def save_files(self) -> dict[str, bytes]:
        """A checkpoint as files, for a driver on another node (no shared filesystem needed)."""
        tmp = tempfile.mkdtemp(prefix=owned_prefix("eppo-ckpt-"))
        try:
            self.learner.save(Path(tmp))
            return folder_files(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def load_files(self, files: Mapping[str, bytes]) -> int:
        tmp = tempfile.mkdtemp(prefix=owned_prefix("eppo-ckpt-"))
        try:
            return self.load(str(write_files(files, tmp)))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def node_id(self) -> str:
        return _node_id()


class LearnerRank(LearnerWorker):
    """Rank `rank` of `world` learner actors. Placed first; `rendezvous()` (rank 0) names the group's address on
    its node, then every rank's `start(address)` joins the group and builds its Learner (FSDP2-sharded)."""

    def __init__(self, cfg_data: dict, rank: int, world: int, threads: int | None = None,
                 model_files: Mapping[str, bytes] | None = None) -> None:
        _threads(threads)
        self._base_sent = False
        self._args = (cfg_data, model_files)
        self.rank, self.world = rank, world

    def rendezvous(self) -> str:
        import ray

        return free_address(ray.util.get_node_ip_address())

    def start(self, address: str) -> None:
        cfg_data, model_files = self._args
        del self._args
        self._start(cfg_data, model_files, Group(self.rank, self.world, address))

    # save_files (inherited) gives this rank's part of a checkpoint: its DCP shard, and on rank 0 the metadata
    # and the single files; the driver joins every rank's into one folder.

    def close(self) -> None:
        self.learner.group.close()


class LearnerRanks:
    """The driver's handle on `world` learner rank actors: every call goes to each rank (their collectives need
    all of them), rank 0 answers. The batch is put in the object store once; every rank reads it from its node."""

    def __init__(self, ray, ranks: list) -> None:  # noqa: ANN001  (the ray module, actor handles)
        self._ray, self.ranks = ray, ranks
        address = _get(ray, ranks[0].rendezvous.remote(), "learner rank 0")
        _get(ray, [r.start.remote(address) for r in ranks], "learner ranks")

    def train_step(self, samples: list[Sample]) -> StepReport:
        batch = self._ray.put(samples)
        return _get(self._ray, [r.train_step.remote(batch) for r in self.ranks], "learner ranks")[0]

    def weights(self):  # noqa: ANN201  (rank 0's ObjectRef; the others' calls are waited for with it)
        refs = [r.weights.remote() for r in self.ranks]
        return refs[0], refs[1:]

    def save_files(self) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        for part in _get(self._ray, [r.save_files.remote() for r in self.ranks], "learner ranks"):
            files.update(part)
        return files

    def load_files(self, files: Mapping[str, bytes]) -> int:
        shipped = self._ray.put(dict(files))
        return _get(self._ray, [r.load_files.remote(shipped) for r in self.ranks], "learner ranks")[0]

    def node_ids(self) -> list[str]:
        return _get(self._ray, [r.node_id.remote() for r in self.ranks], "learner ranks")

    def kill(self) -> None:
        for actor in self.ranks:
            try:
                self._ray.kill(actor)
            except Exception:  # already gone
                pass


def _get(ray, refs, what: str):
    """`ray.get(refs)`; an actor that died under the call (or never started) is one line, `WorkerLost`."""

    try:
        return ray.get(refs)
    except ray.exceptions.RayActorError as exc:
        raise lost(ray, exc, what) from None


class RemotePolicy(PolicyBackend):
    """A PolicyBackend whose `generate` runs in the generator actor; the tokenizer stays in the driver."""

    def __init__(self, handle: ActorHandle, tokenizer: PreTrainedTokenizerBase) -> None:
        import ray

        self._ray, self.handle, self.tokenizer = ray, handle, tokenizer
        self.sent_bytes = 0  # prompts out, generations back, since the owner last read it

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams,
                 budgets: Sequence[int] | None = None) -> list[Generation]:

        out = _get(self._ray, self.handle.generate.remote(list(prompts), params, budgets), "generator actor")
        self.sent_bytes += wire_bytes((list(prompts), params, budgets)) + wire_bytes(out)
        return out

    def update_weights(self, state_dict: Mapping[str, object]) -> None:
        _get(self._ray, self.handle.update_weights.remote(state_dict), "generator actor")


class LocalWorkers:
    """Everything in this process (`ray.enabled=false`): for debugging, tests and one-machine pipelines.

    `engine`: an engine already running (the pipeline's `SharedEngine`, holding the starting model's weights),
    sampled from instead of starting one; closing it stays its owner's job.
    """

    def __init__(self, cfg: Config, engine: PolicyBackend | None = None) -> None:
        self.policy: PolicyBackend = engine if engine is not None else make_engine(engine_spec(cfg))
        self.learner_worker = LearnerWorker(to_dict(cfg))
        self.merger = AdapterMerger()
        self.last_sync: dict[str, float] = {}  # the last weight sync's bytes and seconds

    def train(self, samples: list[Sample]) -> StepReport:
        return self.learner_worker.train_step(samples)

    def sync_weights(self) -> None:
        t0 = time.perf_counter()
        sent = load_update(self.policy, self.merger, self.learner_worker.weights())
        self.last_sync = {"weight_sync_bytes": float(sent), "weight_sync_s": time.perf_counter() - t0}

    def save(self, path: Path) -> None:
        self.learner_worker.save(str(path))

    def load(self, path: Path) -> int:
        return self.learner_worker.load(str(path))

    def close(self) -> None:
        self.policy.close()


def _driver_folder(name: str) -> str | None:
    """The model folder when `name` is a path on the driver (aliases such as "tiny" resolve on each node)."""

    if name.lower() in {a.lower() for a in (*DEFAULT_ALIASES, "tiny", TINY_MODEL_NAME)}:
        return None
    return resolve_model(name) if Path(name).expanduser().exists() else None


def local_resources(cfg: Config) -> dict[str, float]:
    """The custom resources a one-machine Ray must offer for every actor of this config to be placed."""
    r = cfg.ray
    need: dict[str, float] = {}
    lc = cfg.learner
    rank = (lc.resources_per_rank or r.learner_resources) if lc.world_size > 1 else r.learner_resources
    for wanted, times in ((r.resources_per_worker, max(1, cfg.env.num_workers)),
                          (r.generator_resources, cfg.generator.engines), (rank, lc.world_size)):
        for name, amount in wanted.items():
            need[name] = need.get(name, 0.0) + amount * times
    return need


class RayWorkers:
    """`generator.engines` generator actors and a learner actor (or `learner.world_size` rank actors), placed by
    `ray.*` and `learner.resources_per_rank` resources on any node of the cluster."""

    def __init__(self, cfg: Config) -> None:
        import ray


        self._ray = ray
        r = cfg.ray
        check_model(cfg.model.name)  # here, not in the actors: a broken folder is then one line naming it, exit 2
        check_resources("ray.generator_resources", r.generator_resources)
        check_resources("ray.learner_resources", r.learner_resources)
        # The driver may be a CPU-only head: whether to ask for GPUs is the cluster's answer, not the driver's.
        lc, engines = cfg.learner, cfg.generator.engines
        on_gpu = ray.cluster_resources().get("GPU", 0) >= 1
        # one engine and one learner share a GPU; several engines or ranks get their own
        shared = engines == 1 and lc.world_size == 1
        gpus = r.num_gpus if r.num_gpus is not None else \
            (0.0 if not on_gpu else 0.5 if shared else float(cfg.generator.tensor_parallel_size))
        folder = _driver_folder(cfg.model.name)
        data = folder_files(folder) if folder else {}
        files = ray.put(data) if data else None  # one copy in the object store for every actor
        del data
        gen_cls = ray.remote(GeneratorWorker).options(num_cpus=r.actor_cpus, num_gpus=gpus,
                                                      resources=r.generator_resources)
        self.gens = [gen_cls.remote(engine_spec(cfg), r.torch_threads, files) for _ in range(engines)]
        self.gen = self.gens[0]
        self.ranks: LearnerRanks | None = None
        if lc.world_size > 1:
            rank_gpus = lc.gpus_per_rank if lc.gpus_per_rank is not None else (1.0 if on_gpu else 0.0)
            rank_cls = ray.remote(LearnerRank).options(num_cpus=r.actor_cpus, num_gpus=rank_gpus,
                                                       resources=lc.resources_per_rank or r.learner_resources)
            self.ranks = LearnerRanks(ray, [rank_cls.remote(to_dict(cfg), k, lc.world_size, r.torch_threads, files)
                                            for k in range(lc.world_size)])
        else:
            learner_cls = ray.remote(LearnerWorker).options(num_cpus=r.actor_cpus, num_gpus=gpus,
                                                            resources=r.learner_resources)
            self.learner = learner_cls.remote(to_dict(cfg), r.torch_threads, files)
        tokenizer = load_tokenizer(cfg.model.name)
        self.remotes = [RemotePolicy(g, tokenizer) for g in self.gens]
        self.policy: RemotePolicy | EngineGroup = self.remotes[0] if engines == 1 else EngineGroup(self.remotes)
        self.sent = {"samples": 0, "weights": 0, "checkpoint": 0}
        self.last_sync: dict[str, float] = {}

    def train(self, samples: list[Sample]) -> StepReport:
        if self.ranks is not None:
            report = self.ranks.train_step(samples)
        else:
            report = _get(self._ray, self.learner.train_step.remote(samples), "learner actor")
        self.sent["samples"] += wire_bytes(samples) + wire_bytes(report)
        return report

    def sync_weights(self) -> None:
        # The weights' ObjectRef is passed on, not fetched: each generator reads them from its node's object store.
        t0 = time.perf_counter()
        if self.ranks is not None:
            ref, others = self.ranks.weights()
        else:
            ref, others = self.learner.weights.remote(), []
        sizes = _get(self._ray, [g.update_weights.remote(ref) for g in self.gens] + others,
                     "generator or learner actor")[: len(self.gens)]
        self.sent["weights"] += sum(sizes)
        self.last_sync = {"weight_sync_bytes": float(sizes[0]), "weight_sync_s": time.perf_counter() - t0}

    def _learner_call(self, method: str, *args):  # noqa: ANN202
        if self.ranks is not None:
            return getattr(self.ranks, method)(*args)
        return _get(self._ray, getattr(self.learner, method).remote(*args), "learner actor")

    def save(self, path: Path) -> None:
        # Written by the driver, from files the learner sends: its node need not see the driver's disk.
        files = self._learner_call("save_files")
        self.sent["checkpoint"] += sum(len(v) for v in files.values())
        write_files(files, path)

    def load(self, path: Path) -> int:
        return self._learner_call("load_files", folder_files(path))

    def placement(self) -> dict:
        """The node id of the generator and of the learner (with several: of each engine and each rank)."""
        gens = _get(self._ray, [g.node_id.remote() for g in self.gens], "generator actor")
        learners = self.ranks.node_ids() if self.ranks is not None else \
            [_get(self._ray, self.learner.node_id.remote(), "learner actor")]
        out: dict = {"generator": gens[0], "learner": learners[0]}
        if len(gens) > 1:
            out["generators"] = gens
        if len(learners) > 1:
            out["learner_ranks"] = learners
        return out

    def traffic(self) -> dict[str, int]:
        """Bytes per kind since the last call (then the counts start again)."""
        out = {**self.sent, "generate": sum(p.sent_bytes for p in self.remotes)}
        self.sent = dict.fromkeys(self.sent, 0)
        for p in self.remotes:
            p.sent_bytes = 0
        return out

    def close(self) -> None:
        try:  # let the generators stop their engine processes first; ray.kill alone would orphan them
            self._ray.get([g.close.remote() for g in self.gens], timeout=60)
        except Exception:  # already dead, or stuck: killed below
            pass
        if self.ranks is not None:
            self.ranks.kill()
        for actor in [*self.gens, *([] if self.ranks is not None else [self.learner])]:
            try:
                self._ray.kill(actor)
            except Exception:  # already gone
                pass


def make_workers(cfg: Config, engine: PolicyBackend | None = None) -> LocalWorkers | RayWorkers:
    """Ray actors (`ray.enabled`) or this process; a running `engine` is only reused in this process."""
    if cfg.ray.enabled:
        return RayWorkers(cfg)
    return LocalWorkers(cfg, engine)


def network_metrics(pool: EnvPool, workers: LocalWorkers | RayWorkers) -> dict[str, float]:
    """What crossed process (and, on a cluster, node) boundaries this iteration, in bytes; {} in local mode."""
    if not isinstance(workers, RayWorkers):
        return {}
    out = {f"net_{k}_bytes": float(v) for k, v in workers.traffic().items()}
    traffic = getattr(pool, "traffic", None)
    out["net_env_bytes"] = float(traffic()) if callable(traffic) else 0.0
    out["net_bytes"] = sum(out.values())
    return out


def placement(pool: EnvPool, workers: LocalWorkers | RayWorkers) -> dict:
    """Which node runs what (written to the run directory as placement.json in Ray mode)."""
    if not isinstance(workers, RayWorkers):
        return {}
    where = getattr(pool, "placement", None)
    return {"driver": _node_id(), "env_workers": where() if callable(where) else [], **workers.placement()}
