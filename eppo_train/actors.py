"""Where the generator and the learner run: in this process, or as Ray actors (one each) beside the env workers.

The trainer only sees `Workers`: `.policy` (a `PolicyBackend` the rollout samples from), `train(samples)`,
`sync_weights()` (learner -> generator, every iteration), `save`/`load` (checkpoints) and `close`. In Ray mode
`.policy` is a thin proxy whose `generate` calls the generator actor, so `run_rollout` is the same code either way,
and weights travel learner -> object store -> generator without passing through the driver.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from eppo_train.config import Config, from_dict, to_dict
from eppo_train.learner import Learner, StepReport
from eppo_train.policy.base import Generation, PolicyBackend, SamplingParams
from eppo_train.policy.engine import EngineSpec, make_engine
from eppo_train.records import Sample


def _threads(n: int | None) -> None:
    # Ray pins OMP threads to an actor's CPU share; generation and learning alternate, so each may use every core.
    torch.set_num_threads(max(1, n or os.cpu_count() or 1))


def engine_spec(cfg: Config) -> EngineSpec:
    """The generation engine a run samples with (`model.backend`, its dtype, the sequence limit)."""
    m = cfg.model
    return EngineSpec(m.name, m.backend, m.generator_dtype, max(cfg.rollout.max_total_tokens, 256), cfg.run.seed,
                      m.kv_cache_gb)


class GeneratorWorker:
    """Hosts the sampling copy of the model: a vLLM engine or an HFPolicy (`model.backend`)."""

    def __init__(self, spec: EngineSpec, threads: int | None = None) -> None:
        _threads(threads)
        self.policy = make_engine(spec)

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams,
                 budgets: Sequence[int] | None = None) -> list[Generation]:
        return self.policy.generate(prompts, params, budgets=budgets)

    def update_weights(self, state: Mapping[str, torch.Tensor]) -> int:
        self.policy.update_weights(state)
        return len(state)

    def close(self) -> None:
        """Stop the engine (vLLM's engine-core process) before the actor goes."""
        self.policy.close()


class LearnerWorker:
    """Hosts the Learner; takes plain config data so that it pickles into an actor without surprises."""

    def __init__(self, cfg_data: dict, threads: int | None = None) -> None:
        _threads(threads)
        self.learner = Learner(from_dict(cfg_data))

    def train_step(self, samples: list[Sample]) -> StepReport:
        return self.learner.train_step(samples)

    def weights(self) -> dict[str, torch.Tensor]:
        return self.learner.trainable_weights()

    def save(self, path: str) -> None:
        self.learner.save(Path(path))

    def load(self, path: str) -> int:
        self.learner.load(Path(path))
        return self.learner.step


class RemotePolicy(PolicyBackend):
    """A PolicyBackend whose `generate` runs in the generator actor; the tokenizer stays in the driver."""

    def __init__(self, handle, tokenizer) -> None:
        import ray

        self._ray, self.handle, self.tokenizer = ray, handle, tokenizer

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams,
                 budgets: Sequence[int] | None = None) -> list[Generation]:
        return self._ray.get(self.handle.generate.remote(list(prompts), params, budgets))

    def update_weights(self, state_dict: Mapping[str, object]) -> None:
        self._ray.get(self.handle.update_weights.remote(state_dict))


class LocalWorkers:
    """Everything in this process (`ray.enabled=false`): for debugging and tests."""

    def __init__(self, cfg: Config) -> None:
        self.gen = GeneratorWorker(engine_spec(cfg))
        self.policy: PolicyBackend = self.gen.policy
        self.learner_worker = LearnerWorker(to_dict(cfg))

    def train(self, samples: list[Sample]) -> StepReport:
        return self.learner_worker.train_step(samples)

    def sync_weights(self) -> None:
        self.gen.update_weights(self.learner_worker.weights())

    def save(self, path: Path) -> None:
        self.learner_worker.save(str(path))

    def load(self, path: Path) -> int:
        return self.learner_worker.load(str(path))

    def close(self) -> None:
        self.policy.close()


class RayWorkers:
    """A generator actor and a learner actor (each may sit on any node of the cluster)."""

    def __init__(self, cfg: Config) -> None:
        import ray

        from eppo_train.policy.models import load_tokenizer

        self._ray = ray
        gpu = 1 if torch.cuda.is_available() else 0
        gen_cls = ray.remote(num_cpus=cfg.ray.actor_cpus, num_gpus=gpu * 0.5)(GeneratorWorker)
        learner_cls = ray.remote(num_cpus=cfg.ray.actor_cpus, num_gpus=gpu * 0.5)(LearnerWorker)
        self.gen = gen_cls.remote(engine_spec(cfg), cfg.ray.torch_threads)
        self.learner = learner_cls.remote(to_dict(cfg), cfg.ray.torch_threads)
        self.policy: PolicyBackend = RemotePolicy(self.gen, load_tokenizer(cfg.model.name))

    def train(self, samples: list[Sample]) -> StepReport:
        return self._ray.get(self.learner.train_step.remote(samples))

    def sync_weights(self) -> None:
        # The weights' ObjectRef is passed on, not fetched: the generator reads them from the object store.
        self._ray.get(self.gen.update_weights.remote(self.learner.weights.remote()))

    def save(self, path: Path) -> None:
        self._ray.get(self.learner.save.remote(str(path)))

    def load(self, path: Path) -> int:
        return self._ray.get(self.learner.load.remote(str(path)))

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


def make_workers(cfg: Config) -> LocalWorkers | RayWorkers:
    return RayWorkers(cfg) if cfg.ray.enabled else LocalWorkers(cfg)
