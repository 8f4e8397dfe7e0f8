"""The driver loop: rollout -> advantages -> learner step -> weights to the generator, once per iteration.

Writes `runs/<name>/`: `config.yaml` (the resolved config), `metrics.jsonl`, `tb/` (TensorBoard), `plots/*.png`,
`checkpoints/step_NNNNNN/` (model as a transformers folder + tokenizer, `learner.pt` with optimizer, pacer and RNG
state, `trainer.json` with the step and the metrics offset) and `latest` (the newest checkpoint's name).
`train(cfg, resume=True)` continues from `latest`: the same step counter, pacer state and metrics.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import dataclass, replace
from importlib import import_module
from pathlib import Path

from eppo_train.advantages import compute_advantages
from eppo_train.config import Config, ConfigError, TaskConfig, save_config
from eppo_train.metrics import MetricsWriter


class RunError(ValueError):
    """A user error about the run directory (exists, nothing to resume): one line, exit 2."""


@dataclass
class TaskSlot:
    """One configured task: the env id the rollout makes, and the label EPPO paces and logs it by."""

    cfg: TaskConfig
    env_id: str
    label: str


def prepare_tasks(cfg: Config) -> list[TaskSlot]:
    """Import task modules, check every id, and register a run-local variant where a task sets its own name,
    kwargs or turn limit (so two settings of one env are two tasks, and Ray workers rebuild them from the spec)."""
    import gymnasium as gym

    import eppo_envs
    from eppo_envs.core.registry import task_spec

    for module in cfg.env.imports:
        try:
            import_module(module)
        except ImportError as exc:
            raise ConfigError(f"env.imports: cannot import {module!r} ({exc})") from None
    slots, labels = [], set()
    for i, t in enumerate(cfg.env.tasks):
        if t.id not in gym.registry:
            raise ConfigError(f"env.tasks.{i}.id: unknown task {t.id!r} (registered: {', '.join(eppo_envs.tasks())})")
        base = gym.spec(t.id)
        try:
            label = t.name or task_spec(t.id).task
        except KeyError:
            label = t.name or t.id.split("/")[-1]
        if label in labels:
            raise ConfigError(f"env.tasks.{i}: task {label!r} appears twice; give one a `name`")
        labels.add(label)
        env_id = t.id
        if t.name or t.kwargs or t.max_turns:
            env_id = f"run/{label}-v0"
            steps = min(t.max_turns, base.max_episode_steps or t.max_turns) if t.max_turns else base.max_episode_steps
            kwargs = {**base.kwargs, **t.kwargs}
            known = gym.registry.get(env_id)
            if known is None or (known.kwargs, known.max_episode_steps, known.entry_point) != (
                    kwargs, steps, base.entry_point):
                eppo_envs.register(env_id, base.entry_point, task=label, description=f"{t.id} as {label}",
                                   max_episode_steps=steps, **kwargs)
        slots.append(TaskSlot(t, env_id, label))
    return slots


def rollout_config(cfg: Config, slots: list[TaskSlot], iteration: int):
    from eppo_train.rollout import RolloutConfig

    r = cfg.rollout
    context = {s.env_id: "full" if s.cfg.context == "full" else f"window:{s.cfg.window}" for s in slots}
    return RolloutConfig(
        group_size=r.group_size, max_turns=r.max_turns, max_new_tokens=r.max_new_tokens,
        max_total_tokens=r.max_total_tokens, temperature=r.temperature, top_p=r.top_p, context=context,
        system_prompt=r.system_prompt, seed=(cfg.run.seed * 1_000_003 + iteration * 7919) % 2**31,
        progress=r.progress,
    )


def problems_for(cfg: Config, slots: list[TaskSlot], iteration: int) -> list:
    """The iteration's problems: seeded by (run seed, iteration, task), so a resumed run draws the same ones."""
    from eppo_train.rollout import Problem

    out = []
    for s in slots:
        rng = random.Random(f"{cfg.run.seed}/{iteration}/{s.label}")
        out += [Problem(s.env_id, s.cfg.split, rng.randrange(2**31)) for _ in range(s.cfg.problems)]
    return out


def rollout_metrics(episodes, samples) -> dict[str, dict[str, float]]:
    per: dict[str, dict[str, float]] = {}
    for task in sorted({e.task for e in episodes}):
        eps = [e for e in episodes if e.task == task]
        lengths = [t.info.get("response_tokens", 0) for e in eps for t in e.turns]
        steps = sum(e.num_steps for e in eps)
        per[task] = {
            "success": sum(e.won for e in eps) / len(eps),
            "reward": sum(e.total_reward for e in eps) / len(eps),
            "response_length": sum(lengths) / max(len(lengths), 1),
            "turns": steps / len(eps),
            "invalid_rate": sum(e.invalid_actions for e in eps) / max(steps, 1),
            "episodes": float(len(eps)),
            "samples": float(sum(1 for s in samples if s.task == task)),
        }
    return per


class Trainer:
    def __init__(self, cfg: Config, resume: bool = False) -> None:
        self.cfg = cfg
        self.run_dir = cfg.run_dir
        self.resume = resume
        self.slots = prepare_tasks(cfg)

    # ------------------------------------------------------------------ run directory
    def _latest(self) -> Path | None:
        marker = self.run_dir / "latest"
        if not marker.exists():
            return None
        path = self.run_dir / "checkpoints" / marker.read_text().strip()
        return path if path.exists() else None

    def _prepare_dir(self) -> tuple[int, int | None]:
        """(first iteration, metrics offset to resume from, or None for a fresh start)."""
        if self.resume:
            latest = self._latest()
            if latest is None:
                raise RunError(f"nothing to resume in {self.run_dir} (no checkpoint yet)")
            state = json.loads((latest / "trainer.json").read_text())
            print(f"resuming {self.run_dir} from {latest.name}: continuing at step {int(state['step']) + 1} of {self.cfg.run.iterations}", flush=True)  # noqa: E501
            return int(state["step"]), int(state["metrics_offset"])
        if (self.run_dir / "metrics.jsonl").exists() or (self.run_dir / "checkpoints").exists():
            if not self.cfg.run.overwrite:
                raise RunError(f"{self.run_dir} already holds a run: --resume {self.run_dir}, another "
                               "--set run.name=..., or --set run.overwrite=true")
            shutil.rmtree(self.run_dir)
        return 0, None

    def _save(self, workers, step: int, metrics: MetricsWriter, tokenizer) -> Path:
        name = f"step_{step:06d}"
        path = self.run_dir / "checkpoints" / name
        workers.save(path)
        tokenizer.save_pretrained(str(path / "model"))  # the checkpoint is a loadable model folder
        (path / "trainer.json").write_text(json.dumps({"step": step, "metrics_offset": metrics.offset()}))
        (self.run_dir / "latest").write_text(name)
        kept = sorted((self.run_dir / "checkpoints").glob("step_*"))
        for old in kept[: -max(self.cfg.run.keep_checkpoints, 1)]:
            shutil.rmtree(old, ignore_errors=True)
        return path

    # ------------------------------------------------------------------ the loop
    def run(self) -> Path:
        from eppo_train.actors import local_resources, make_workers, network_metrics, placement
        from eppo_train.envpool import LocalEnvPool, RayEnvPool, init_ray
        from eppo_train.rollout import run_rollout

        start, offset = self._prepare_dir()
        if self.cfg.sft.steps > 0 and start == 0:
            from eppo_train.sft import sft_model

            # RL starts from the SFT model; the saved config points at it (a resume loads its checkpoint)
            self.cfg = replace(self.cfg, model=replace(self.cfg.model, name=sft_model(self.cfg, self.slots)),
                               sft=replace(self.cfg.sft, steps=0))
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, self.run_dir / "config.yaml")
        if cfg.ray.enabled:
            init_ray(cfg.ray.address, self._local_cpus(), None if cfg.ray.address else local_resources(cfg))
            pool = RayEnvPool(cfg.env.num_workers, address=cfg.ray.address, cpus_per_worker=cfg.ray.cpus_per_worker,
                              resources=cfg.ray.resources_per_worker)
        else:
            pool = LocalEnvPool()
        workers = make_workers(cfg)
        tokenizer = workers.policy.tokenizer
        metrics = MetricsWriter(self.run_dir, cfg.run.tensorboard, resume_offset=offset,
                                resume_step=start if offset is not None else None)
        try:
            if start > 0:
                workers.load(self._latest())
            workers.sync_weights()
            if cfg.ray.enabled:  # where each actor runs; the start-up transfers are not an iteration's traffic
                (self.run_dir / "placement.json").write_text(json.dumps(placement(pool, workers), indent=1))
                network_metrics(pool, workers)
            for it in range(start, cfg.run.iterations):
                self._iteration(it, workers, pool, metrics, run_rollout)
                step = it + 1
                if step % max(cfg.run.save_every, 1) == 0 or step == cfg.run.iterations:
                    self._save(workers, step, metrics, tokenizer)
        finally:
            metrics.close()
            pool.close()
            workers.close()
        if cfg.run.plots and (self.run_dir / "metrics.jsonl").stat().st_size > 0:
            from eppo_train.plots import plot_run

            plot_run(self.run_dir)
        return self.run_dir

    def _local_cpus(self) -> int | None:
        import os

        if self.cfg.ray.address:
            return None
        # Logical CPUs for every actor (fewer and an actor would wait forever to be scheduled): generation, env
        # steps and learning alternate, so they may share the physical cores.
        need = int(2 * self.cfg.ray.actor_cpus + self.cfg.env.num_workers + 1)
        return max(self.cfg.ray.num_cpus or os.cpu_count() or 1, need)

    def _iteration(self, it: int, workers, pool, metrics: MetricsWriter, run_rollout) -> dict:
        from eppo_train.actors import network_metrics

        cfg = self.cfg
        t0 = time.perf_counter()
        result = run_rollout(workers.policy, pool, problems_for(cfg, self.slots, it), rollout_config(cfg, self.slots, it))
        rollout_s = time.perf_counter() - t0
        label = {s.env_id: s.label for s in self.slots}
        for s in result.samples:
            s.task = label.get(s.meta.get("env_id"), s.task)
        for e in result.episodes:
            e.task = label.get(e.env_id, e.task)
        adv = compute_advantages(result.samples, cfg.algo.advantage, cfg.algo.scale_by_std,
                                 cfg.algo.filter_zero_variance, cfg.algo.gigpo_weight, cfg.algo.gigpo_gamma)
        t1 = time.perf_counter()
        report = workers.train(adv.samples) if adv.samples else None
        workers.sync_weights()
        learn_s = time.perf_counter() - t1

        tasks = rollout_metrics(result.episodes, result.samples)
        for t, values in adv.per_task.items():
            tasks.setdefault(t, {}).update(values)
        if report is not None:
            for t, values in report.per_task.items():
                tasks.setdefault(t, {}).update(values)
        st = result.stats
        scalars = {
            "iteration": it,
            "success": st.get("success", 0.0),
            "rollout_time_s": rollout_s,
            "learner_time_s": learn_s,
            "rollout_tokens": float(st.get("tokens_generated", 0)),
            "rollout_tokens_per_s": float(st.get("tokens_per_second", 0.0)),
            "env_time_share": float(st.get("env_share", 0.0)),
            "iteration_time_s": time.perf_counter() - t0,
            **{f"adv_{k}": v for k, v in adv.stats.items()},
            **(report.metrics if report is not None else {}),
            **network_metrics(pool, workers),
        }
        events = {}
        if report is not None and report.pace is not None:
            events = {"crossovers": [list(p) for p in report.pace.crossovers], "spikes": list(report.pace.spikes)}
        return metrics.log(it + 1, scalars, tasks, events)


def train(cfg: Config, resume: bool = False) -> Path:
    return Trainer(cfg, resume=resume).run()
