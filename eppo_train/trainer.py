"""The driver loop: rollout -> advantages -> learner step -> weights to the generator, once per iteration.

Writes `runs/<name>/`: `config.yaml` (the resolved config), `metrics.jsonl`, `tb/` (TensorBoard), `plots/*.png`,
`checkpoints/step_NNNNNN/` (model as a transformers folder + tokenizer, `learner.pt` with optimizer, pacer and RNG
state, `trainer.json` with the step and the metrics offset), `latest` (the newest checkpoint's name) and, with
`run.eval_every` = N > 0, `evals/step_NNNNNN.json`: the fixed evaluation set (`cfg.evaluation`, greedy) before the
first iteration and after every N-th and the last, its per-task success also in that iteration's metrics.
`train(cfg, resume=True)` continues from `latest`: the same step counter, pacer state and metrics. The trainer
trains from `cfg.model.name` as given; the SFT warm start is a stage before it (`sft.warm_start`, run by the CLI
and the pipeline), so the config a run saves is the config it was given.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from eppo_train.algos.advantages import compute_advantages
from eppo_train.config import Config, save_config
from eppo_train.core.files import write_json_atomic, write_text_atomic
from eppo_train.core.records import ANCHOR, DEMO
from eppo_train.core.stats import rollout_metrics
from eppo_train.eval.fixed_set import evaluate_set, evaluation_agent
from eppo_train.report import memory
from eppo_train.report.metrics import MetricsWriter
from eppo_train.report.plots import plot_run
from eppo_train.rollout.env_pool import LocalEnvPool, RayEnvPool
from eppo_train.rollout.guidance import expert_guidance
from eppo_train.rollout.loop import run_rollout
from eppo_train.rollout.refill import refill
from eppo_train.rollout.task_slots import (
    prepare_tasks,
    rollout_config,
    task_estimators,
    train_problems,
    training_rewards,
)
from eppo_train.runtime.ray_cluster import init_ray

if TYPE_CHECKING:
    from eppo_train.policy.base import PolicyBackend


class RunError(ValueError):
    """A user error about the run directory (exists, nothing to resume): one line, exit 2."""


def holds_run(run_dir: Path) -> bool:
    return (run_dir / "metrics.jsonl").exists() or (run_dir / "checkpoints").exists()


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The run's newest checkpoint folder (`checkpoints/<latest>`), None before the first. Its `model/` is a
    loadable transformers folder."""
    marker = run_dir / "latest"
    if not marker.exists():
        return None
    name = marker.read_text().strip()
    path = run_dir / "checkpoints" / name
    return path if name and (path / "trainer.json").exists() else None


def checkpoint_step(run_dir: Path) -> int:
    """The iteration of the run's newest checkpoint (0: none, start afresh)."""
    latest = latest_checkpoint(run_dir)  # only a checkpoint with its trainer.json
    return int(json.loads((latest / "trainer.json").read_text())["step"]) if latest is not None else 0


def _earlier(run_dir: Path, name: str) -> str:
    """How to resume from an earlier checkpoint than `name`, naming those there are."""
    folder = run_dir / "checkpoints"
    others = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name != name) if folder.is_dir() else []
    there = f" ({', '.join(others)})" if others else " (there is none: start over)"
    return f"point {run_dir / 'latest'} at an earlier checkpoint to resume from there{there}"


def _checkpoint_problem(path: Path) -> str | None:
    """What makes checkpoint `path` unloadable, read cheaply (safetensors headers, learner.pt's zip directory), or
    None. Unchecked, a truncated file is a 50-line traceback from inside the learner actor."""
    import zipfile

    from safetensors import SafetensorError, safe_open

    weights = sorted((path / "model").glob("*.safetensors"))
    if not weights:
        return "no model/*.safetensors"
    for file in weights:
        try:
            with safe_open(str(file), "pt"):
                pass
        except (SafetensorError, OSError) as exc:
            return f"{file.relative_to(path)} is unreadable ({exc})"
    state = path / "learner.pt"
    if not state.is_file():
        return "no learner.pt"
    try:
        with zipfile.ZipFile(state):  # torch.save's format: a truncated file has no central directory
            pass
    except (zipfile.BadZipFile, OSError) as exc:
        return f"learner.pt is unreadable ({exc})"
    return None


def check_run_dir(cfg: Config, resume: bool) -> None:
    """Raise `RunError` when the run directory cannot be used as asked (before any slow stage starts)."""
    run_dir = cfg.run_dir
    if resume:
        latest = latest_checkpoint(run_dir)
        if latest is None:
            marker = run_dir / "latest"
            if marker.exists():  # it names a checkpoint that is gone or cut short: "no checkpoint yet" would mislead
                name = marker.read_text().strip()
                raise RunError(f"{marker} names {name!r}, which is not a whole checkpoint (no {run_dir}/checkpoints/"
                               f"{name}/trainer.json); {_earlier(run_dir, name)}")
            raise RunError(f"nothing to resume in {run_dir} (no checkpoint yet)")
        try:
            int(json.loads((latest / "trainer.json").read_text())["step"])
        except (ValueError, KeyError, TypeError) as exc:  # cut short or edited: say so, not a JSONDecodeError
            raise RunError(f"{latest / 'trainer.json'} is unreadable ({type(exc).__name__}: {exc}); "
                           f"{_earlier(run_dir, latest.name)}") from None
        problem = _checkpoint_problem(latest)
        if problem:  # found here, not as the learner actor's safetensors or torch.load traceback
            raise RunError(f"{latest}: {problem}; {_earlier(run_dir, latest.name)}")
    elif holds_run(run_dir) and not cfg.run.overwrite:
        raise RunError(f"{run_dir} already holds a run: --resume {run_dir}, another "
                       "--set run.name=..., or --set run.overwrite=true")


class Trainer:
    def __init__(self, cfg: Config, resume: bool = False, engine: PolicyBackend | None = None) -> None:
        """`engine`: a running generation engine holding `cfg.model.name`'s weights, reused instead of starting one
        (the pipeline's shared engine; local mode only)."""
        self.cfg = cfg
        self.engine = engine
        self.run_dir = cfg.run_dir
        self.resume = resume
        self.slots = prepare_tasks(cfg)
        self._demos: list | None = None  # algo.ptx_coef > 0: the SFT demonstrations, made at the first need

    # ------------------------------------------------------------------ run directory
    def _latest(self) -> Path | None:
        return latest_checkpoint(self.run_dir)

    def _prepare_dir(self) -> tuple[int, int | None]:
        """(first iteration, metrics offset to resume from, or None for a fresh start)."""
        check_run_dir(self.cfg, self.resume)
        if self.resume:
            latest = self._latest()
            state = json.loads((latest / "trainer.json").read_text())
            print(f"resuming {self.run_dir} from {latest.name}: continuing at step {int(state['step']) + 1} of "
                  f"{self.cfg.run.iterations}", flush=True)
            return int(state["step"]), int(state["metrics_offset"])
        if holds_run(self.run_dir):
            shutil.rmtree(self.run_dir)  # run.overwrite (check_run_dir refuses otherwise)
        return 0, None

    def _save(self, workers, step: int, metrics: MetricsWriter, tokenizer) -> Path:
        name = f"step_{step:06d}"
        path = self.run_dir / "checkpoints" / name
        workers.save(path)
        tokenizer.save_pretrained(str(path / "model"))  # the checkpoint is a loadable model folder
        write_json_atomic(path / "trainer.json", {"step": step, "metrics_offset": metrics.offset()})
        write_text_atomic(self.run_dir / "latest", name)  # written last: it names a complete checkpoint
        kept = sorted((self.run_dir / "checkpoints").glob("step_*"))
        for old in kept[: -max(self.cfg.run.keep_checkpoints, 1)]:
            shutil.rmtree(old, ignore_errors=True)
        return path

    # ------------------------------------------------------------------ the loop
    def run(self) -> Path:
        from eppo_train.learner.workers import local_resources, make_workers, network_metrics, placement

        start, offset = self._prepare_dir()
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, self.run_dir / "config.yaml")
        if cfg.ray.enabled:
            init_ray(cfg.ray.address, self._local_cpus(), None if cfg.ray.address else local_resources(cfg))
            pool = RayEnvPool(cfg.env.num_workers, address=cfg.ray.address, cpus_per_worker=cfg.ray.cpus_per_worker,
                              resources=cfg.ray.resources_per_worker)
        else:
            pool = LocalEnvPool()
        workers = make_workers(cfg, self.engine)
        tokenizer = workers.policy.tokenizer
        metrics = MetricsWriter(self.run_dir, cfg.run.tensorboard, resume_offset=offset,
                                resume_step=start if offset is not None else None)
        try:
            if start > 0:
                workers.load(self._latest())
            workers.sync_weights()
            if cfg.run.eval_every and start == 0:
                self._evaluate(workers.policy, 0)  # the start point of the curve (a resume has it already)
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
        from eppo_train.learner.workers import network_metrics

        cfg = self.cfg
        t0 = time.perf_counter()
        rc = rollout_config(cfg, self.slots, it)
        result = run_rollout(workers.policy, pool, train_problems(cfg, self.slots, it), rc)
        batch, guided, refilled = result.samples, {}, None
        if cfg.algo.refill_rounds:  # DAPO's dynamic sampling: rollout/refill.py
            refilled = refill(cfg, self.slots, it, workers.policy, pool, rc, batch,
                              lambda samples: training_rewards(samples, self.slots))
            batch = batch + refilled.samples
        if cfg.algo.expert_guidance:

            guidance = expert_guidance(batch, pool, workers.policy.tokenizer, rc, cfg.sft.max_reply_tokens)
            batch, guided = batch + guidance.samples, guidance.per_task
            del guidance
        rollout_s = time.perf_counter() - t0
        anchored = cfg.algo.anchor_kl > 0  # groups without variance train on the anchor, never the policy loss
        adv = compute_advantages(training_rewards(batch, self.slots), cfg.algo.advantage, cfg.algo.scale_by_std,
                                 cfg.algo.filter_zero_variance or anchored, cfg.algo.advantage_options,
                                 task_estimators(cfg, self.slots))
        train = list(adv.samples)
        if anchored:
            train += [replace(s, meta={**s.meta, "role": ANCHOR}) for s in adv.dropped]
        if cfg.algo.ptx_coef > 0 and train:
            train += self._replayed_demos(it, pool, workers.policy.tokenizer)
        t1 = time.perf_counter()
        report = workers.train(train) if train else None
        workers.sync_weights()
        learn_s = time.perf_counter() - t1

        tasks = rollout_metrics(result.episodes, result.samples)
        refill_tasks = refilled.per_task if refilled is not None else {}
        for t, values in [*guided.items(), *adv.per_task.items(), *refill_tasks.items()]:
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
            **({"refill_rounds": float(refilled.rounds), "refill_episodes": float(len(refilled.episodes))}
               if refilled is not None else {}),
            **(report.metrics if report is not None else {}),
            **workers.last_sync,  # the weight sync's bytes and seconds
            **network_metrics(pool, workers),
        }
        step = it + 1
        if cfg.run.eval_every and (step % cfg.run.eval_every == 0 or step == cfg.run.iterations):
            evaluated = self._evaluate(workers.policy, step)
            for t, values in evaluated["tasks"].items():
                tasks.setdefault(t, {}).update(values)
            scalars.update(eval_success=evaluated["success"], eval_time_s=evaluated["seconds"])
        events = {}
        if report is not None and report.pace is not None:
            events = {"crossovers": [list(p) for p in report.pace.crossovers], "spikes": list(report.pace.spikes)}
        del result, batch, adv, train, refilled, report  # the iteration's samples, before its memory is measured
        memory.release()
        scalars.update(memory.iteration_metrics())
        return metrics.log(step, scalars, tasks, events)

    def _replayed_demos(self, it: int, pool, tokenizer) -> list:  # noqa: ANN001 (the env pool, the tokenizer)
        """`algo.ptx_samples` SFT demonstrations for this iteration's PPO-ptx term (algos/anchors.py), drawn by
        (run seed, iteration) from the demos of `sft.episodes` expert episodes per task (the SFT stage's own:
        the same `sft` seed stream), made once. Their log-probs are the untempered model's."""
        from eppo_train.sft import expert_samples  # loads torch

        if self._demos is None:
            demos, _ = expert_samples(self.cfg, self.slots, tokenizer, pool, self.cfg.sft.episodes)
            self._demos = [replace(s, advantage=0.0, meta={**s.meta, "role": DEMO, "behaviour": "expert",
                                                            "sampling": [1.0, 1.0, 0.0]}) for s in demos]
        rng = random.Random(f"{self.cfg.run.seed}/ptx/{it}")
        return rng.sample(self._demos, min(self.cfg.algo.ptx_samples, len(self._demos)))

    def _evaluate(self, policy, step: int) -> dict:  # noqa: ANN001 (the generator's PolicyBackend)
        """Greedy evaluation of the policy as it stands after `step` iterations on the fixed set; the report (with
        each instance's outcome: any two steps compare paired) goes to `evals/step_NNNNNN.json`. Returns the mean
        success over tasks, the seconds it took and per task `eval_success` (with its Wilson interval as
        `eval_success_low`/`_high`) and `eval_reward`, for the iteration's metrics."""

        agent = evaluation_agent(self.cfg, policy)
        report = evaluate_set(self.cfg, self.slots, agent, f"{self.run_dir.name} step {step}")
        write_json_atomic(self.run_dir / "evals" / f"step_{step:06d}.json", {"step": step, **report})
        tasks = {t: {"eval_success": r["success"], "eval_success_low": r["success_ci95"][0],
                     "eval_success_high": r["success_ci95"][1], "eval_reward": r["mean_reward"]}
                 for t, r in report["tasks"].items()}
        success = sum(v["eval_success"] for v in tasks.values()) / max(len(tasks), 1)
        print(f"evaluation after {step} iteration(s): mean success {success:.3f} ("
              + ", ".join(f"{t} {v['eval_success']:.2f}" for t, v in tasks.items())
              + f"; {self.cfg.evaluation.episodes} episodes a task, {report['seconds']:.0f} s)", flush=True)
        return {"tasks": tasks, "success": success, "seconds": report["seconds"]}


def train(cfg: Config, resume: bool = False) -> Path:
    return Trainer(cfg, resume=resume).run()
