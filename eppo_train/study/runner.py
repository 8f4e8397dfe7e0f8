"""`eppo-train study` (`make experiment`): several losses x seeds (and EPPO ablations) on one suite, resumable.

Each planned run has a name (`grpo-seed0`, `eppo-high-seed0`) and, once it has trained and been evaluated, one
small JSON result file `<results>/<name>.json` (study_record.py): the final evaluation with per-instance outcomes,
per-iteration per-task training numbers, crossovers, spikes, the config, command, date, wall time and load. A run
whose result file exists is skipped, so a study longer than one sitting (or one machine) completes by running the
same command again wherever the committed result files are; a run interrupted mid-way resumes from its newest
checkpoint under `<work>/runs/<name>/` (same machine). Once every run is done, the report is rebuilt from the
result files alone (study_report.py).

    <work>/runs/<name>/                 the trainer's run (metrics.jsonl, checkpoints/); scratch, never committed
    <results>/<name>.json               one finished run (docs/results/study/ for `make experiment`)
    <results>/plan.json                 the planned run names, so the report can say which are missing
    <report>                            study.md with its figures/ folder beside it

Every run starts from the same SFT model (one cached warm start of the config's `sft` section, seed 0, the
pipeline's settings; or `--sft DIR`) and trains for the same iterations, problems and group size, so the losses
are compared at equal samples; evaluation instances are seeds 0..N-1 of each task's evaluation split for every run,
so two runs' outcomes are paired instance by instance.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from eppo_train.config import Config, ConfigError, from_dict, parse_override, to_dict
from eppo_train.core.files import write_json_atomic
from eppo_train.pipeline import evaluate_model, rl_stage, shared_engine
from eppo_train.report import memory
from eppo_train.report.metrics import read_metrics
from eppo_train.report.progress import Progress
from eppo_train.rollout.task_slots import prepare_tasks
from eppo_train.study.plan import StudyPaths, StudyRun
from eppo_train.study.record import (
    START_FILE,
    build_record,
    load_results,
    load_starts,
    model_fingerprint,
    reward_drift,
    start_key,
    start_path,
    start_record,
)
from eppo_train.study.report import write_report
from eppo_train.trainer import checkpoint_step

if TYPE_CHECKING:
    from eppo_train.policy.engine import SharedEngine
    from eppo_train.report.progress import Progress
    from eppo_train.rollout.task_slots import TaskSlot

def run_config(cfg: Config, run: StudyRun, model: str, work: Path) -> Config:
    """The trainer config of one run: the study config, the run's loss, seed and overrides, from `model`."""
    data = to_dict(cfg)
    for text in run.overrides:
        key, value = parse_override(text)
        node = data
        *path, last = key.split(".")
        for part in path:
            node = node[part]
        if last not in node:
            raise ConfigError(f"ablation {run.group}: unknown key {key}")
        node[last] = value
    rc = from_dict(data)
    return replace(rc, run=replace(rc.run, out_dir=str(work / "runs"), name=run.name, seed=run.seed, overwrite=True),
                   model=replace(rc.model, name=model),
                   algo=replace(rc.algo, name=run.algo))


def pending_runs(plan: list[StudyRun], results: Path) -> list[StudyRun]:
    return [r for r in plan if not (results / f"{r.name}.json").exists()]


# keys that name where a run ran, not what it did: they may differ between machines without making a result stale
# Keys that say where a run ran or how its start model is named, not what it computed. The start model itself is
# compared by its weights' sha256 (the report lists every start model it finds), so `sft.tasks_from` naming the
# same recipe by another config is no change.
# `learner.cache_frozen` changes how the frozen layers' output is obtained, not the update (equal to 1e-7 in
# tests/test_learner_cache.py): runs recorded before it existed are not stale.
MACHINE_KEYS = ("run.out_dir", "model.name", "model.kv_cache_gb", "sft.tasks_from", "learner.cache_frozen")


def _flat(d: dict | list, prefix: str = "") -> dict[str, object]:
    """Leaf keys as dotted paths (list items by index: `env.tasks.0.max_turns`), so a field added later with its
    default `None` reads the same as its absence in an older record."""
    out: dict[str, object] = {}
    for k, v in (d.items() if isinstance(d, dict) else enumerate(d)):
        if isinstance(v, dict | list) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def with_defaults(recorded: dict) -> dict:
    """A recorded config with every setting added since at its default (the behaviour the run had), so that a new
    option does not mark every committed run as made with other settings; as recorded where it no longer loads."""
    try:
        return to_dict(from_dict(recorded))
    except (ConfigError, TypeError, ValueError):
        return recorded


def stale_results(cfg: Config, plan: list[StudyRun], results: Path, work: Path) -> dict[str, list[str]]:
    """Done runs whose recorded config differs from what this study config would run now: name -> changed keys."""
    stale: dict[str, list[str]] = {}
    for run in plan:
        path = results / f"{run.name}.json"
        if not path.exists():
            continue
        recorded = json.loads(path.read_text()).get("config", {})
        now = _flat(to_dict(run_config(cfg, run, "", work)))
        then = _flat(with_defaults(recorded))
        changed = sorted(k for k in set(now) | set(then) if k not in MACHINE_KEYS and now.get(k) != then.get(k))
        if changed:
            stale[run.name] = changed
    return stale


def write_plan(plan: list[StudyRun], results: Path) -> None:
    results.mkdir(parents=True, exist_ok=True)
    data = {"runs": [{"name": r.name, "group": r.group, "algo": r.algo, "seed": r.seed,
                      "overrides": list(r.overrides)} for r in plan]}
    (results / "plan.json").write_text(json.dumps(data, indent=1) + "\n")


def shared_start(cfg: Config, slots: list[TaskSlot], sft_dir: str | None, progress: Progress) -> tuple[str, dict]:
    """The model every run starts from and a record of it (the weights' sha256 says whether two machines agree)."""

    if sft_dir:
        model, how = sft_dir, "given with --sft"  # run_study checked it
    elif cfg.sft.steps > 0:
        from eppo_train.sft import sft_model_in_stage, sft_source

        # seed 0 for every run: the warm start is shared, only RL differs between seeds
        sft_cfg, sft_slots = sft_source(cfg, slots)
        model = sft_model_in_stage(sft_cfg, sft_slots, progress)
        how = (f"sft.steps={cfg.sft.steps} on {cfg.sft.episodes} expert episodes per task of "
               f"{', '.join(s.label for s in sft_slots)} (cached)")
    else:
        model, how = cfg.model.name, "no SFT (sft.steps=0)"
    return model, {"base_model": cfg.model.name, "model": model, "how": how, **model_fingerprint(model)}


def run_one(cfg: Config, run: StudyRun, model: str, start: dict, slots: list[TaskSlot], paths: StudyPaths,
            command: str, progress: Progress, engine: SharedEngine | None = None) -> Path:
    """Train (or resume) one run, evaluate its final model, write its result file; returns the file."""

    rc = run_config(cfg, run, model, paths.work)
    run_dir = rc.run_dir
    t0, load0 = time.time(), os.getloadavg()
    progress.start(run.name)
    memory.ACCOUNT.open(run.name)
    resumed = checkpoint_step(run_dir)
    final = rl_stage(rc, progress, engine)
    t1 = time.time()
    report = evaluate_model(rc, slots, str(final), progress, engine)
    t2 = time.time()
    record = build_record(run, rc, start, read_metrics(run_dir), report, command=command, resumed_from=resumed,
                          started=t0, train_s=t1 - t0, eval_s=t2 - t1, load=(load0, os.getloadavg()))
    record["memory_peak_gb"] = memory.in_gb(memory.ACCOUNT.close(run.name))  # per process: the study's budget
    path = paths.results / f"{run.name}.json"
    write_json_atomic(path, record)
    progress.finish(run.name, report["tasks"])
    return path


def evaluate_start(cfg: Config, model: str, start: dict, slots: list[TaskSlot], paths: StudyPaths, command: str,
                   progress: Progress, engine: SharedEngine | None = None) -> Path:
    """The start model on the same evaluation set (`start-model.json`, once): what every run's RL adds to it."""

    path = start_path(paths.results, start)
    if path.exists():
        progress.skip("start model")
        return path
    if path.name != START_FILE:
        progress.note(f"start model: its weights ({start_key(start)}) are not the ones {START_FILE} "
                     f"evaluated (this machine's SFT came out different): evaluating it into {path.name}")
    t0, load0 = time.time(), os.getloadavg()
    progress.start("start model")
    report = evaluate_model(cfg, slots, model, progress, engine)
    write_json_atomic(path, start_record(start, report, command=command, started=t0, eval_s=time.time() - t0,
                                         load=(load0, os.getloadavg())))
    progress.finish("start model", report["tasks"])
    return path


def run_study(cfg: Config, plan: list[StudyRun], paths: StudyPaths, command: str, sft_dir: str | None = None,
              say: Callable[[str], None] = print, sections: list[tuple[str, Path]] | None = None) -> Path:
    """Run every planned run that has no result file yet, then rebuild the report (of `sections`, each a title and
    a results folder; default: this study's alone); returns the report's path."""

    # before anything is written: else a wrong --sft leaves a plan.json (and its folders) behind its error
    if sft_dir and not (Path(sft_dir) / "config.json").is_file():
        raise ConfigError(f"--sft: {sft_dir} is not a model folder (no config.json)")
    write_plan(plan, paths.results)
    todo = pending_runs(plan, paths.results)
    done = [r.name for r in plan if r not in todo]
    say(f"study: {len(done)}/{len(plan)} runs done ({', '.join(done) or 'none'}); results in {paths.results}")
    for name, keys in stale_results(cfg, plan, paths.results, paths.work).items():
        shown = ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
        say(f"study: warning: {name} was made with other settings ({shown}); it counts as done: delete "
            f"{paths.results / (name + '.json')} to run it again")
    for drift in reward_drift([*load_results(paths.results), *load_starts(paths.results).values()]):
        names = sorted(n for ns in drift.scored.values() for n in ns)
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        say(f"study: warning: {drift.task}'s reward has changed since {shown} were scored (revision "
            f"{'/'.join(map(str, sorted(drift.scored)))} there, {drift.now} now); they count as done: delete their "
            f"result files to measure them again")
    if todo:

        say(f"study: to run now: {', '.join(r.name for r in todo)}")
        paths.work.mkdir(parents=True, exist_ok=True)
        slots = prepare_tasks(cfg)
        progress = Progress(["sft", "start model", *(r.name for r in todo)], [s.label for s in slots])

        engine = shared_engine(cfg)  # one engine for every run's rollouts and evaluation (or None: hf, Ray)
        try:
            model, start = shared_start(cfg, slots, sft_dir, progress)
            evaluate_start(cfg, model, start, slots, paths, command, progress, engine)
            for run in todo:
                run_one(cfg, run, model, start, slots, paths, command, progress, engine)
        finally:
            if engine is not None:
                engine.close()
            progress.stop()  # its heartbeat thread
        # not in the `finally`: an interrupted or failed study is not "finished"
        progress.done(paths.results)
    else:
        say("study: every run is done; rebuilding the report from the result files")
    return write_report(sections or [(paths.results.name, paths.results)], paths.report)
