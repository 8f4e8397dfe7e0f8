"""Env instances for a rollout batch: in this process (`LocalEnvPool`) or spread over Ray env workers (`RayEnvPool`).

The rollout addresses episodes by *slot* (0..n-1 in a batch). A slot keeps its env instance across batches when it
runs the same task again, so expensive envs (ALFWorld, WebShop) are built once. Envs travel to workers as gymnasium
`EnvSpec`s, so any task registered in the driver (built-in or a user's) is made the same way in a worker.

A dead Ray worker is replaced and its episodes are rebuilt by resetting on the same `(split, seed)` and replaying the
actions taken so far: EPPO envs are deterministic, so the rollout goes on as if nothing had happened. The same holds
when a whole node goes: its workers' calls fail, the replacements are scheduled on the nodes that are left (any node
offering the workers' resources, e.g. `{"env": 1}`), and their episodes are replayed there.
"""

from __future__ import annotations

import sys
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

import eppo_envs  # noqa: F401  (registers the built-in tasks)
from eppo_envs.core import TaskError
from eppo_train.runtime.interrupt import WorkerLost
from eppo_train.runtime.ray_cluster import check_resources, init_ray, lost, wire_bytes

StepOut = tuple[str, float, bool, bool, dict[str, Any]]


@dataclass(frozen=True)
class EnvJob:
    """Start `env_id` on `(split, seed)` in `slot`."""

    slot: int
    env_id: str
    split: str
    seed: int


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registered spec (raises a KeyError naming the known tasks for an unknown id)."""
    if env_id not in gym.registry:
        raise KeyError(f"unknown task {env_id!r}; registered: {', '.join(eppo_envs.tasks())}")
    return gym.spec(env_id)


class EnvHost:
    """The env instances of one process, by slot. Used directly by `LocalEnvPool` and inside each Ray worker."""

    def __init__(self, env_kwargs: dict[str, dict[str, Any]] | None = None) -> None:
        self.env_kwargs = env_kwargs or {}
        self.envs: dict[int, tuple[str, gym.Env]] = {}
        self.errors_said: set[tuple[str, str]] = set()  # (env id, exception type) already warned about

    def _env(self, slot: int, spec: gym.envs.registration.EnvSpec) -> gym.Env:
        held = self.envs.get(slot)
        if held is not None and held[0] == spec.id:
            return held[1]
        if held is not None:
            held[1].close()
        env = gym.make(spec, **self.env_kwargs.get(spec.id, {}))
        self.envs[slot] = (spec.id, env)
        return env

    def reset(self, jobs: Sequence[tuple[EnvJob, gym.envs.registration.EnvSpec]]) -> list[tuple[str, dict]]:
        out = []
        for job, spec in jobs:
            env = self._env(job.slot, spec)
            out.append(env.reset(seed=job.seed, options={"split": job.split}))
        return out

    def step(self, pairs: Sequence[tuple[int, str]]) -> list[StepOut]:
        out: list[StepOut] = []
        for slot, action in pairs:
            env_id, env = self.envs[slot]
            try:
                obs, reward, terminated, truncated, info = env.step(action)
            except TaskError:  # the task breaks its contract on every step: stop with its one line, not train on it
                raise
            except Exception as exc:  # an env bug must not take the whole batch down: end this episode, say why
                info = {"env_error": f"{type(exc).__name__}: {exc}", "won": False, "action_valid": False,
                        "traceback": traceback.format_exc(limit=5)}
                obs, reward, terminated, truncated = f"Environment error: {exc}", 0.0, False, True
                self._say(env_id, exc)
            out.append((obs, float(reward), bool(terminated), bool(truncated), info))
        return out

    def _say(self, env_id: str, exc: Exception) -> None:
        """One stderr line the first time a task raises a kind of error: its episodes end unwon and are counted
        (`env_errors`), but a task that raises on every step must not train or score 0 in silence."""
        key = (env_id, type(exc).__name__)
        if key not in self.errors_said:
            self.errors_said.add(key)
            first = str(exc).splitlines()[0][:200] if str(exc) else ""
            print(f"warning: {env_id}.step raised {type(exc).__name__}: {first}; the episode ends unwon "
                  f"(said once; every such episode counts in env_errors)", file=sys.stderr, flush=True)

    def expert_actions(self, slots: Sequence[int]) -> list[str]:
        out = []
        for slot in slots:
            try:
                out.append(self.envs[slot][1].unwrapped.expert_action())
            except Exception as exc:  # no expert, or it failed: an empty (invalid) turn, reported by the env
                out.append(f"<!-- no expert action: {type(exc).__name__} -->")
        return out

    def replay(self, items: Sequence[tuple[EnvJob, gym.envs.registration.EnvSpec, list[str]]]) -> int:
        """Rebuild episodes after a worker restart: reset on the same seeds, then re-apply their actions."""
        for job, spec, actions in items:
            self.reset([(job, spec)])
            self.step([(job.slot, a) for a in actions])
        return len(items)

    def node_id(self) -> str:
        """The Ray node this host runs on (placement checks and docs/cluster.md)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def close(self) -> None:
        for _, env in self.envs.values():
            env.close()
        self.envs.clear()


class EnvPool(ABC):
    """Where the rollout's envs live. Results come back in the order of the request."""

    num_workers: int = 1

    @abstractmethod
    def reset(self, jobs: Sequence[EnvJob]) -> list[tuple[str, dict]]: ...

    @abstractmethod
    def step(self, slots: Sequence[int], actions: Sequence[str]) -> list[StepOut]: ...

    @abstractmethod
    def expert_actions(self, slots: Sequence[int]) -> list[str]: ...

    def close(self) -> None:  # noqa: B027
        """Release the envs (and workers)."""

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalEnvPool(EnvPool):
    """Every env in this process: no startup cost, the right choice for fast envs and tests."""

    def __init__(self, env_kwargs: dict[str, dict[str, Any]] | None = None) -> None:
        self.host = EnvHost(env_kwargs)

    def reset(self, jobs: Sequence[EnvJob]) -> list[tuple[str, dict]]:
        return self.host.reset([(job, env_spec(job.env_id)) for job in jobs])

    def step(self, slots: Sequence[int], actions: Sequence[str]) -> list[StepOut]:
        return self.host.step(list(zip(slots, actions, strict=True)))

    def expert_actions(self, slots: Sequence[int]) -> list[str]:
        return self.host.expert_actions(slots)

    def close(self) -> None:
        self.host.close()


@dataclass
class _SlotState:
    job: EnvJob
    spec: gym.envs.registration.EnvSpec
    worker: int
    actions: list[str] = field(default_factory=list)


NODE_CHECK_S = 2.0  # while a replacement env worker waits for a node: how often to look whether any is alive


class RayEnvPool(EnvPool):
    """Env instances spread over `num_workers` Ray actors; each hosts a slice of the batch, of any tasks."""

    def __init__(
        self,
        num_workers: int,
        *,
        address: str | None = None,
        env_kwargs: dict[str, dict[str, Any]] | None = None,
        cpus_per_worker: float | None = None,
        resources: dict[str, float] | None = None,
        max_restarts: int = 3,
        respawn_timeout_s: float = 300.0,
    ) -> None:
        import ray

        init_ray(address)
        self._ray = ray
        self.num_workers = max(1, int(num_workers))
        total = ray.cluster_resources().get("CPU", 1.0)
        # Env workers mostly wait on the generator; let several share a core instead of blocking on scheduling.
        self.cpus_per_worker = cpus_per_worker if cpus_per_worker is not None else min(1.0, total / self.num_workers)
        self.resources = dict(resources or {})
        check_resources("ray.resources_per_worker (env workers)", self.resources)
        self.env_kwargs = env_kwargs or {}
        self.max_restarts = max_restarts
        self.respawn_timeout_s = respawn_timeout_s
        self.restarts = 0
        self.sent_bytes = 0  # driver <-> env workers (actions, observations, specs), since the last `traffic()`
        self._actor_cls = ray.remote(EnvHost)
        self.workers = [self._spawn() for _ in range(self.num_workers)]
        self.slots: dict[int, _SlotState] = {}

    def _spawn(self):
        return self._actor_cls.options(num_cpus=self.cpus_per_worker, resources=self.resources).remote(self.env_kwargs)

    def placement(self) -> list[str]:
        """The node id of each env worker (in worker order)."""
        return self._ray.get([w.node_id.remote() for w in self.workers])

    def traffic(self) -> int:
        """Bytes exchanged with the env workers since the last call (then the count starts again)."""
        sent, self.sent_bytes = self.sent_bytes, 0
        return sent

    # ----------------------------------------------------------------- fan out, survive dead workers
    def _fan_out(self, method: str, per_worker: dict[int, list]) -> dict[int, list]:
        calls = {w: getattr(self.workers[w], method).remote(args) for w, args in per_worker.items() if args}
        results: dict[int, list] = {}
        for w, ref in calls.items():
            for attempt in range(self.max_restarts + 1):
                try:
                    results[w] = self._ray.get(ref)
                    break
                except self._ray.exceptions.RayTaskError as exc:  # a task's own error: the same as in-process
                    if isinstance(exc.cause, TaskError):
                        raise exc.cause from None
                    raise
                except self._ray.exceptions.RayActorError as exc:  # died, or its node did (ActorDied/Unavailable)
                    if attempt == self.max_restarts:
                        raise lost(self._ray, exc, f"env worker {w}, replaced {self.max_restarts} times,") from None
                    self._replace(w, str(lost(self._ray, exc, f"env worker {w}")))
                    ref = getattr(self.workers[w], method).remote(per_worker[w])
            self.sent_bytes += wire_bytes(per_worker[w]) + wire_bytes(results[w])
        return results

    def _replace(self, w: int, why: str) -> None:
        """A fresh actor for worker `w`, with its episodes rebuilt from their seeds and past actions; `why` (the
        death, one line) is said on stderr, as the rollout goes on without it otherwise showing."""
        self.restarts += 1
        try:
            self._ray.kill(self.workers[w])
        except Exception:  # already gone
            pass
        self.workers[w] = self._spawn()
        items = [(s.job, s.spec, list(s.actions)) for s in self.slots.values() if s.worker == w]
        print(f"warning: {why}; a new one replays its {len(items)} episodes and the rollout goes on",
              file=sys.stderr, flush=True)
        t0 = time.monotonic()
        deadline = t0 + self.respawn_timeout_s
        ref = self.workers[w].replay.remote(items)
        try:  # the replacement waits for a node with the workers' resources; none left would mean waiting forever
            while True:
                try:
                    self._ray.get(ref, timeout=max(0.0, min(NODE_CHECK_S, deadline - time.monotonic())))
                    break
                except self._ray.exceptions.GetTimeoutError:
                    if time.monotonic() >= deadline:
                        raise
                    # a local Ray whose raylet died has no node left: nothing will ever host the replacement
                    # (waiting the whole respawn_timeout_s would then blame the resources)
                    if not self._node_alive():
                        raise WorkerLost(f"env worker {w} died with its Ray node (the raylet ended) and no node "
                                         "is left to host a replacement") from None
        except self._ray.exceptions.GetTimeoutError:  # WorkerLost: eppo-train's one line and resume hint, not a traceback
            raise WorkerLost(f"env worker {w} died and no node could host a replacement within "
                             f"{time.monotonic() - t0:.0f}s (it needs {self.cpus_per_worker:g} CPU and "
                             f"{self.resources or 'no custom resources'})") from None
        except self._ray.exceptions.RayActorError as exc:  # the replacement died too, or its node (the raylet) did
            raise lost(self._ray, exc, f"replacement of env worker {w}") from None

    def _node_alive(self) -> bool:
        """Whether the cluster still has a live node (an unanswerable question counts as yes: keep waiting)."""
        try:
            return any(node.get("Alive") for node in self._ray.nodes())
        except Exception:  # noqa: BLE001
            return True

    def _scatter(self, method: str, items: Sequence[Any], workers: Sequence[int]) -> list[Any]:
        """Send item i to worker `workers[i]` (one call per worker, all in flight together); results in item order."""
        per_worker: dict[int, list] = {}
        index: dict[int, list[int]] = {}
        for i, (item, w) in enumerate(zip(items, workers, strict=True)):
            per_worker.setdefault(w, []).append(item)
            index.setdefault(w, []).append(i)
        out: list[Any] = [None] * len(items)
        for w, results in self._fan_out(method, per_worker).items():
            for i, result in zip(index[w], results, strict=True):
                out[i] = result
        return out

    # ----------------------------------------------------------------- the EnvPool API
    def reset(self, jobs: Sequence[EnvJob]) -> list[tuple[str, dict]]:
        for job in jobs:
            # The rollout orders slots by task, so round-robin spreads each task over the workers.
            self.slots[job.slot] = _SlotState(job, env_spec(job.env_id), job.slot % self.num_workers)
        states = [self.slots[job.slot] for job in jobs]
        return self._scatter("reset", [(s.job, s.spec) for s in states], [s.worker for s in states])

    def step(self, slots: Sequence[int], actions: Sequence[str]) -> list[StepOut]:
        pairs = list(zip(slots, actions, strict=True))
        out = self._scatter("step", pairs, [self.slots[slot].worker for slot in slots])
        for slot, action in pairs:
            self.slots[slot].actions.append(action)  # only after the step is known to have happened
        return out

    def expert_actions(self, slots: Sequence[int]) -> list[str]:
        return self._scatter("expert_actions", list(slots), [self.slots[slot].worker for slot in slots])

    def close(self) -> None:
        for worker in self.workers:
            try:
                self._ray.kill(worker)
            except Exception:
                pass
        self.workers = []


def make_pool(workers: int = 0, address: str | None = None, **kwargs: Any) -> EnvPool:
    """`workers` <= 0 (and no address): envs in this process; else that many Ray env workers."""
    if workers <= 0 and not address:
        return LocalEnvPool(**kwargs)
    return RayEnvPool(max(1, workers), address=address, **kwargs)
