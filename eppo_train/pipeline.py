"""`eppo-train pipeline` (`make train`): evaluate the base model, SFT on expert demos, evaluate, EPPO, evaluate.

    runs/<timestamp>/config.yaml      the resolved pipeline config
    runs/<timestamp>/pipeline.json    finished stages and their results (what `--resume` continues from)
    runs/<timestamp>/evals/<stage>.json   `fixed_eval.evaluate_set` results on the fixed evaluation set (base, sft, rl)
    runs/<timestamp>/sft/             the SFT model (transformers folder) and sft.json (loss per step, demo counts)
    runs/<timestamp>/rl/              the trainer's run: metrics.jsonl, tb/, checkpoints/, plots/*.png
    runs/<timestamp>/summary.md       per-task success and mean reward before SFT, after SFT and after RL, with 95%
                                      intervals and paired bootstrap intervals of SFT − base and RL − SFT

Every stage reuses the project's one implementation of its job: demos and RL rollouts go through
`rollout.run_rollout`, evaluation through `fixed_eval.evaluate_set` (seeds 0..N-1 of each task's evaluation split,
greedy), RL through `trainer.Trainer`. A stage's result is recorded only when it has finished, so a killed run
resumes at the first unfinished stage (RL from its latest checkpoint).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eppo_train.config import Config, save_config
from eppo_train.core.files import write_json_atomic
from eppo_train.eval.fixed_set import evaluate_set, greedy_params
from eppo_train.policy.agents import PolicyAgent
from eppo_train.policy.engine import SharedEngine
from eppo_train.policy.factory import PolicyOptions, make_policy
from eppo_train.report import memory
from eppo_train.report.progress import Progress, RLWatcher
from eppo_train.report.summary import write_summary
from eppo_train.report.ticks import listen
from eppo_train.rollout.task_slots import prepare_tasks
from eppo_train.trainer import RunError, Trainer, checkpoint_step, latest_checkpoint

if TYPE_CHECKING:
    from eppo_train.rollout.task_slots import TaskSlot

STAGES = ("eval_base", "sft", "eval_sft", "rl", "eval_rl")


# ---------------------------------------------------------------------------- evaluation (fixed_eval)
def evaluate_model(cfg: Config, slots: list[TaskSlot], model: str, progress: Progress | None = None,
                   engine: SharedEngine | None = None) -> dict[str, Any]:
    """Greedy evaluation of `model` on the fixed set: seeds 0..N-1 of each task's eval split (on `engine` when
    given: the pipeline's one engine, with `model`'s weights pushed into it)."""

    params = greedy_params(cfg)
    if engine is not None:
        agent = PolicyAgent(engine.serving(model), params)
    else:
        agent = make_policy(model, cfg.model.backend, PolicyOptions(
            dtype=cfg.model.generator_dtype, batch_size=cfg.evaluation.batch_size, params=params,
            max_model_len=max(cfg.rollout.max_total_tokens, 256)))

    def on_progress(done: int, total: int, tokens: int, seconds: float) -> None:
        if progress is not None:
            progress.episodes("episodes", done, total, tokens, seconds, stage_eta=True)

    try:
        return evaluate_set(cfg, slots, agent, model, on_progress)
    finally:
        agent.policy.close()


# ---------------------------------------------------------------------------- the stages
class Pipeline:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool = False) -> None:

        self.cfg, self.run_dir, self.resume = cfg, Path(run_dir), resume
        self.slots = prepare_tasks(cfg)
        self.state_path = self.run_dir / "pipeline.json"
        self.state: dict[str, Any] = {"done": {}}
        if resume and self.state_path.exists():
            self.state = read_state(self.state_path)
        self.progress = Progress(STAGES, [s.label for s in self.slots])
        self.engine = shared_engine(cfg)  # one engine for all four generating stages

    def _finish(self, stage: str, result: dict[str, Any]) -> None:
        self.state["done"][stage] = result
        write_json_atomic(self.state_path, self.state)  # a kill never leaves half a state file

    def model_after(self, stage: str) -> str:
        done = self.state["done"]
        if stage == "rl" and "rl" in done:
            return done["rl"]["model"]
        if stage in ("sft", "rl") and "sft" in done:
            return done["sft"]["model"]
        return self.cfg.model.name

    def run(self) -> Path:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        save_config(self.cfg, self.run_dir / "config.yaml")
        try:
            for stage in STAGES:
                if stage in self.state["done"]:
                    self.progress.skip(stage)
                    continue
                self.progress.start(stage)
                memory.ACCOUNT.open(stage)
                result = getattr(self, f"_{stage}")()
                result["memory"] = memory.in_gb(memory.ACCOUNT.close(stage))  # peak RSS per process, for summary.md
                self._finish(stage, result)
                self.progress.finish(stage, result.get("tasks"))
        finally:
            if self.engine is not None:
                self.engine.close()

        path = write_summary(self.run_dir, self.cfg, self.state["done"])
        self.progress.done(path)
        return self.run_dir

    def _eval(self, name: str, model: str) -> dict[str, Any]:
        report = evaluate_model(self.cfg, self.slots, model, self.progress, self.engine)
        (self.run_dir / "evals").mkdir(exist_ok=True)
        (self.run_dir / "evals" / f"{name}.json").write_text(json.dumps(report, indent=1))
        return report

    def _eval_base(self) -> dict[str, Any]:
        return self._eval("base", self.model_after("base"))

    def _eval_sft(self) -> dict[str, Any]:
        return self._eval("sft", self.model_after("sft"))

    def _eval_rl(self) -> dict[str, Any]:
        return self._eval("rl", self.model_after("rl"))

    def _sft(self) -> dict[str, Any]:
        from eppo_train.sft import run_sft

        if self.cfg.sft.steps == 0:
            return {"model": self.cfg.model.name, "steps": 0}
        out = self.run_dir / "sft"
        # the expert plays them: the lines read "expert demo episodes k/n"
        with listen(self.progress.ticks("demo episodes")):
            info = run_sft(self.cfg, self.slots, out, on_step=lambda i, loss: self.progress.sft_step(
                i, self.cfg.sft.steps, loss))
        return {**{k: v for k, v in info.items() if k != "losses"}, "model": str(out)}

    def _rl(self) -> dict[str, Any]:
        model = self.model_after("sft")
        if self.cfg.run.iterations == 0:
            return {"model": model, "iterations": 0}
        cfg = replace(self.cfg, run=replace(self.cfg.run, out_dir=str(self.run_dir), name="rl", overwrite=True),
                      model=replace(self.cfg.model, name=model))
        return {"model": str(rl_stage(cfg, self.progress, self.engine)), "iterations": cfg.run.iterations}


def shared_engine(cfg: Config) -> SharedEngine | None:
    """One vLLM engine for every generating stage of a run (each start costs minutes on CPU); None where each
    stage makes its own (HF needs no engine; Ray puts the generator in an actor)."""
    if cfg.model.backend != "vllm" or cfg.ray.enabled:
        return None
    from eppo_train.learner.workers import engine_spec

    return SharedEngine(engine_spec(cfg))


def rl_stage(cfg: Config, progress: Progress, engine: SharedEngine | None = None) -> Path:
    """Train the run `cfg` names from `cfg.model.name` (resuming from its newest checkpoint; nothing to do when
    it has every iteration), on `engine` when given; returns the final model folder. The pipeline's RL stage and
    each study run."""

    rl_dir = cfg.run_dir
    done = checkpoint_step(rl_dir)
    if done < cfg.run.iterations:
        with RLWatcher(rl_dir, cfg.run.iterations, progress), listen(progress.ticks("rollout episodes", 2)):
            Trainer(cfg, resume=done > 0, engine=engine.serving(cfg.model.name) if engine else None).run()
    return latest_checkpoint(rl_dir) / "model"


def read_state(path: Path) -> dict[str, Any]:
    """pipeline.json; a `RunError` (one line) when it is not the state this module writes (cut short, edited)."""

    try:
        state = json.loads(path.read_text())
    except ValueError as exc:
        raise RunError(f"{path}: not valid JSON ({exc}); fix it, or delete it to rerun every stage") from None
    if not isinstance(state, dict) or not isinstance(state.get("done"), dict):
        raise RunError(f"{path}: no 'done' mapping of finished stages; fix it, or delete it to rerun every stage")
    return state


def default_run_dir(cfg: Config) -> Path:
    return Path(cfg.run.out_dir) / time.strftime("%Y%m%d-%H%M%S")


def run_pipeline(cfg: Config, run_dir: Path | None = None, resume: bool = False) -> Path:
    run_dir = run_dir or default_run_dir(cfg)
    if not resume and (run_dir / "pipeline.json").exists():

        raise RunError(f"{run_dir} already holds a pipeline run: --resume {run_dir}")
    return Pipeline(cfg, run_dir, resume).run()

