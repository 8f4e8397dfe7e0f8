"""Where the generator and the learner run: in this process, or as Ray actors (one each) beside the env workers.

The trainer only sees `Workers`: `.policy` (a `PolicyBackend` the rollout samples from), `train(samples)`,
`sync_weights()` (learner -> generator, every iteration), `save`/`load` (checkpoints) and `close`. In Ray mode
`.policy` is a thin proxy whose `generate` calls the generator actor, so `run_rollout` is the same code either way,
and weights travel learner -> object store -> generator without passing through the driver.

On a cluster nothing assumes a shared filesystem: a model given as a folder on the driver travels to the actors
through the object store (each writes it to a node-local temp folder), and checkpoints come back the same way into
the driver's run directory. Placement follows `ray.*` resources (docs/cluster.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from eppo_envs.tools.teardown.owner import owned_prefix
from eppo_train.config import Config, from_dict, to_dict
from eppo_train.core.records import Sample
from eppo_train.learner.learner import Learner, StepReport
from eppo_train.policy.base import Generation, PolicyBackend, SamplingParams
from eppo_train.policy.engine import EngineSpec, make_engine
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
                      max_sequences=max(episodes, cfg.evaluation.batch_size))


class GeneratorWorker:
    """Hosts the sampling copy of the model: a vLLM engine or an HFPolicy (`model.backend`)."""

    def __init__(self, spec: EngineSpec, threads: int | None = None,
                 model_files: Mapping[str, bytes] | None = None) -> None:
        _threads(threads)
        with _node_local(model_files, "eppo-gen-model-") as local:
            self.policy = make_engine(replace(spec, model=local) if local else spec)

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams,
                 budgets: Sequence[int] | None = None) -> list[Generation]:
        return self.policy.generate(prompts, params, budgets=budgets)

    def update_weights(self, state: Mapping[str, torch.Tensor]) -> int:
        """Load the learner's tensors (vLLM passes them on through a node-local file); returns their bytes."""
        self.policy.update_weights(state)
        return sum(t.numel() * t.element_size() for t in state.values())

    def node_id(self) -> str:
        return _node_id()

    def close(self) -> None:
        """Stop the engine (vLLM's engine-core process) before the actor goes."""
        self.policy.close()


class LearnerWorker:
    """Hosts the Learner; takes plain config data so that it pickles into an actor without surprises."""

    def __init__(self, cfg_data: dict, threads: int | None = None,
                 model_files: Mapping[str, bytes] | None = None) -> None:
        _threads(threads)
        with _node_local(model_files, "eppo-learner-model-") as local:
            if local:
                cfg_data = {**cfg_data, "model": {**cfg_data["model"], "name": local}}
            self.learner = Learner(from_dict(cfg_data))

    def train_step(self, samples: list[Sample]) -> StepReport:
        cuda_peaks("learner")  # the step's own peaks from here
        report = self.learner.train_step(samples)
        release()  # the step's activations and cached states back to the system, in whichever process learns
        report.metrics.update(cuda_peaks("learner"))
        return report

    def weights(self) -> dict[str, torch.Tensor]:
        """What the generator samples the next batch with (learner.staleness: possibly older than the learner's)."""
        return self.learner.sampling_weights()

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

    def train(self, samples: list[Sample]) -> StepReport:
        return self.learner_worker.train_step(samples)

    def sync_weights(self) -> None:
        self.policy.update_weights(self.learner_worker.weights())

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
    for wanted, times in ((r.resources_per_worker, max(1, cfg.env.num_workers)), (r.generator_resources, 1),
                          (r.learner_resources, 1)):
        for name, amount in wanted.items():
            need[name] = need.get(name, 0.0) + amount * times
    return need


class RayWorkers:
    """A generator actor and a learner actor, placed by `ray.*` resources on any node of the cluster."""

    def __init__(self, cfg: Config) -> None:
        import ray


        self._ray = ray
        r = cfg.ray
        check_model(cfg.model.name)  # here, not in the actors: a broken folder is then one line naming it, exit 2
        check_resources("ray.generator_resources", r.generator_resources)
        check_resources("ray.learner_resources", r.learner_resources)
        # The driver may be a CPU-only head: whether to ask for GPUs is the cluster's answer, not the driver's.
        gpus = r.num_gpus if r.num_gpus is not None else (0.5 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0)
        folder = _driver_folder(cfg.model.name)
        data = folder_files(folder) if folder else {}
        files = ray.put(data) if data else None  # one copy in the object store for both actors
        del data
        gen_cls = ray.remote(GeneratorWorker).options(num_cpus=r.actor_cpus, num_gpus=gpus,
                                                      resources=r.generator_resources)
        learner_cls = ray.remote(LearnerWorker).options(num_cpus=r.actor_cpus, num_gpus=gpus,
                                                        resources=r.learner_resources)
        self.gen = gen_cls.remote(engine_spec(cfg), r.torch_threads, files)
        self.learner = learner_cls.remote(to_dict(cfg), r.torch_threads, files)
        self.policy: RemotePolicy = RemotePolicy(self.gen, load_tokenizer(cfg.model.name))
        self.sent = {"samples": 0, "weights": 0, "checkpoint": 0}

    def train(self, samples: list[Sample]) -> StepReport:

        report = _get(self._ray, self.learner.train_step.remote(samples), "learner actor")
        self.sent["samples"] += wire_bytes(samples) + wire_bytes(report)
        return report

    def sync_weights(self) -> None:
        # The weights' ObjectRef is passed on, not fetched: the generator reads them from the object store.
        self.sent["weights"] += _get(self._ray, self.gen.update_weights.remote(self.learner.weights.remote()),
                                     "generator or learner actor")

    def save(self, path: Path) -> None:
        # Written by the driver, from files the learner sends: its node need not see the driver's disk.
        files = _get(self._ray, self.learner.save_files.remote(), "learner actor")
        self.sent["checkpoint"] += sum(len(v) for v in files.values())
        write_files(files, path)

    def load(self, path: Path) -> int:
        return _get(self._ray, self.learner.load_files.remote(folder_files(path)), "learner actor")

    def placement(self) -> dict[str, str]:
        """The node id of the generator and of the learner."""
        gen, learner = _get(self._ray, [self.gen.node_id.remote(), self.learner.node_id.remote()],
                            "generator or learner actor")
        return {"generator": gen, "learner": learner}

    def traffic(self) -> dict[str, int]:
        """Bytes per kind since the last call (then the counts start again)."""
        out = {**self.sent, "generate": self.policy.sent_bytes}
        self.sent = dict.fromkeys(self.sent, 0)
        self.policy.sent_bytes = 0
        return out

    def close(self) -> None:
        try:  # let the generator stop its engine process first; ray.kill alone would orphan it
            self._ray.get(self.gen.close.remote(), timeout=60)
        except Exception:  # already dead, or stuck: killed below
            pass
        for actor in (self.gen, self.learner):
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
