"""`eppo-train`: train (the default when only flags are given), config, plot, sft, pipeline, signal, study and
study-report.
A thin dispatcher: each subcommand is an `add_<name>` (its arguments) and a `cmd_<name>` (the work), registered in
`SUBCOMMANDS`.

    eppo-train --config tiny --set algo.name=grpo --set rollout.group_size=4
    eppo-train --resume runs/tiny
    eppo-train plot runs/tiny
    eppo-train config --explain learner.lr
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from eppo_envs.core import TaskError
from eppo_envs.core.pipes import stdout_closed
from eppo_train.config import Config, ConfigError, describe, load_config, load_run_config, to_dict
from eppo_train.eval.group_signal import Setting, measure, measure_eval, table
from eppo_train.learner.sizing import plan as size_plan
from eppo_train.learner.sizing import read_shape, render
from eppo_train.pipeline import default_run_dir, run_pipeline
from eppo_train.policy.engine import EngineError
from eppo_train.policy.models import ModelNotFoundError, check_model
from eppo_train.policy.tool_calls import check_tool_template
from eppo_train.report.plots import plot_run
from eppo_train.report.progress import Progress, RLWatcher
from eppo_train.report.ticks import listen
from eppo_train.rollout.task_slots import prepare_tasks
from eppo_train.runtime import interrupt
from eppo_train.runtime.interrupt import WorkerLost, guard, lost_line
from eppo_train.runtime.ray_cluster import init_ray
from eppo_train.study.plan import (
    ABLATIONS,
    DEFAULT_ALGOS,
    OFFICIAL,
    STUDY_REPORT,
    OfficialStudy,
    StudyPaths,
    make_plan,
    official,
)
from eppo_train.study.record import ResultError
from eppo_train.study.report import write_report
from eppo_train.study.runner import run_study
from eppo_train.trainer import RunError, check_run_dir, checkpoint_step, holds_run, latest_checkpoint, train

PROG = "eppo-train"

# What an interrupted command prints after "interrupted at ...;": set by the command once it knows its run dir.
_hint_fn: list[Callable[[], str]] = []
_argv: list[str] = []  # the command line as given, for "start over with: ..."


def _error(msg: str) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 2


# ---------------------------------------------------------------- config
def add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="a shipped config name or a YAML path (default: the defaults)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key (repeatable)")
    p.add_argument("--explain", nargs="?", const="", metavar="KEY",
                   help="what each setting means (its type, default and help), or only KEY's (a section: all in it)")


def cmd_config(args: argparse.Namespace) -> int:
    """The resolved config as YAML, or with --explain the settings' help, read from the config's own fields."""
    if args.explain is not None:
        print(describe(args.explain or None))
        return 0
    print(yaml.safe_dump(to_dict(load_config(args.config, args.overrides)), sort_keys=False), end="")
    return 0


# ---------------------------------------------------------------- train
def add_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None,
                   help="a shipped config name (tiny, default, ...) or a YAML path (default: default)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, e.g. --set algo.name=grpo (repeatable)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue the run in RUN_DIR from its latest checkpoint (with its saved config; --set only)")
    p.add_argument("--ray-address", help="join a Ray cluster (e.g. auto or host:6379) instead of a local Ray")


def _one_sample_groups(group_size: int) -> str:
    """Why training refuses `rollout.group_size` < 2 (`eppo-train signal` may play groups of one; validate() cannot
    refuse them for every command)."""
    return (f"rollout.group_size: training needs >= 2 samples per problem (advantages are centred within a group; "
            f"with {group_size} every one is 0 and nothing is learned)")


def cmd_train(args: argparse.Namespace) -> int:
    from eppo_train.sft import warm_start

    overrides = list(args.overrides)
    if args.ray_address:
        overrides += [f"ray.address={args.ray_address}", "ray.enabled=true"]
    if args.resume:
        run_dir = Path(args.resume)
        if args.config:  # a resumed run goes on with its saved config: a --config here would be silently ignored
            return _error(f"--resume {run_dir} continues with the run's saved config; change keys with --set, "
                          "not --config")
        if not (run_dir / "config.yaml").is_file():
            return _error(f"{run_dir} is not a run directory (no config.yaml)")
        if _pipeline_run(run_dir):  # else "no checkpoint yet": its trainer run is rl/, made in stage 4
            return _error(f"{run_dir} is a pipeline run (make train); resume it with: "
                          f'make train ARGS="--resume {run_dir}" (or {PROG} pipeline --resume {run_dir})')
        # the saved config, with the run's location pinned to where it is now
        overrides = [f"run.out_dir={run_dir.parent}", f"run.name={run_dir.name}", *overrides]
        cfg = load_run_config(run_dir / "config.yaml", overrides)
    else:
        # `default`, not the dataclasses' defaults: those name example/GuessNumber-v0 without the module that
        # registers it, so a bare `eppo-train` would stop at "unknown task 'example/GuessNumber-v0'"
        cfg = load_config(args.config or "default", overrides)
    _hint_train(cfg.run_dir, cfg.run.iterations)
    check_run_dir(cfg, bool(args.resume))
    if args.resume:  # said before Ray or an engine starts, and before the saved config is rewritten
        done, planned = checkpoint_step(cfg.run_dir), cfg.run.iterations
        if done > planned:
            return _error(f"{cfg.run_dir} has done {done} iterations, more than run.iterations={planned}; "
                          f"--set run.iterations=N with N > {done} continues it")
        if done == planned:
            print(f"{cfg.run_dir} has done all {done} of its iterations: nothing to train "
                  f"(--set run.iterations=N with N > {done} continues it)")
            return 0
    if cfg.rollout.group_size < 2:
        return _error(_one_sample_groups(cfg.rollout.group_size))
    if cfg.ray.enabled and cfg.ray.address:  # join the cluster now: a wrong address is told before the SFT's minutes

        init_ray(cfg.ray.address)
    if not args.resume:

        # a wrong model.name now, before a local Ray starts (after it, with sft.steps=0, Ray's log of the
        # cancelled actors would follow the line); after the address check, which builds nothing
        _check_model(cfg)
    # the stages: the SFT warm start (cached), then RL from its model; each with its progress lines on stderr
    progress = Progress(["sft", "rl"], [t.id for t in cfg.env.tasks])
    try:
        if not args.resume:
            cfg = warm_start(cfg, progress)
        progress.start("rl", announce=False)  # a set-up error (Ray, the engine) stays the one line
        with RLWatcher(cfg.run_dir, cfg.run.iterations, progress, fresh=not args.resume), \
                listen(progress.ticks("rollout episodes", 2)):
            out = train(cfg, resume=bool(args.resume))
    finally:
        progress.stop()
    print(f"run written to {out}")
    return 0


def _pipeline_run(run_dir: Path) -> bool:
    """Whether `eppo-train pipeline` made `run_dir`: it has pipeline.json once a stage has finished; before that
    only its config.yaml, whose run.out_dir is the folder's parent but whose run.name is not the folder's name (the
    pipeline writes to <out_dir>/<timestamp>; the trainer to <out_dir>/<name>, and it writes metrics or a checkpoint
    as it goes)."""
    import yaml


    if (run_dir / "pipeline.json").exists():
        return True
    if holds_run(run_dir) or (run_dir / "latest").exists():
        return False
    try:
        run = yaml.safe_load((run_dir / "config.yaml").read_text())["run"]
        out_dir, name = Path(run["out_dir"]), str(run["name"])
    except (yaml.YAMLError, OSError, UnicodeDecodeError, KeyError, TypeError):
        return False  # load_run_config says what is wrong with it
    return out_dir.resolve() == run_dir.parent.resolve() and name != run_dir.name


def _hint_train(run_dir: Path, total: int) -> None:
    """Resume from the newest checkpoint; before the first one there is nothing to resume, so start over."""

    def hint() -> str:
        metrics = run_dir / "metrics.jsonl"
        steps = metrics.read_text().count("\n") if metrics.exists() else 0
        saved = latest_checkpoint(run_dir) is not None
        interrupt.set_where(0, f"{run_dir}, iteration {steps + 1}/{total}" if steps or saved
                            else f"{run_dir}, before the first iteration")
        if saved:
            return f"resume with: {PROG} --resume {shlex.quote(str(run_dir))}"
        return f"no checkpoint yet; start over with: {PROG} {shlex.join(_argv)} --set run.overwrite=true"

    _hint_fn[:] = [hint]


# ---------------------------------------------------------------- plot
def add_plot(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory (runs/<name>)")


def cmd_plot(args: argparse.Namespace) -> int:

    for path in plot_run(args.run_dir):
        print(path)
    return 0


# ---------------------------------------------------------------- sft, pipeline
def _config_args(p: argparse.ArgumentParser, default: str | None, default_text: str | None = None) -> None:
    p.add_argument("--config", default=default, help="a shipped config name or a YAML path (default: "
                   f"{default_text or default})")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key (repeatable)")
    p.add_argument("--model", help="the model to start from: smollm2 (default), tiny, or a local HF folder")


def _check_model(cfg: Config) -> None:
    """`check_model`, and in the tools format that the model's chat template declares tools (one line if not)."""
    check_model(cfg.model.name)
    if cfg.env.action_format == "tools":
        check_tool_template(cfg.model.name)


def _load(args: argparse.Namespace, config: str | None = None, saved: Path | None = None):
    """The config named by --config (or `config`), or a run's `saved` config.yaml, then --model and --set."""

    overrides = list(args.overrides) + ([f"model.name={args.model}"] if args.model else [])
    return load_run_config(saved, overrides) if saved else load_config(config or args.config, overrides)


def add_sft(p: argparse.ArgumentParser) -> None:
    _config_args(p, "pipeline")
    p.add_argument("--out", required=True, help="folder for the fine-tuned model")


def cmd_sft(args: argparse.Namespace) -> int:
    from eppo_train import sft

    cfg = _load(args)
    if cfg.sft.steps < 1:
        return _error("sft.steps is 0: nothing to train (--set sft.steps=N)")

    _check_model(cfg)  # a wrong --model now, not after the tasks' set-up and expert demos

    def on_step(i: int, loss: float) -> None:
        interrupt.set_where(0, f"SFT step {min(i + 2, cfg.sft.steps)}/{cfg.sft.steps}")  # the step now running
        print(f"step {i + 1}/{cfg.sft.steps} loss {loss:.4f}", flush=True)

    # what a Ctrl-C names (else "start-up" at any step)
    interrupt.set_where(0, f"expert demos and SFT step 1/{cfg.sft.steps}")
    info = sft.run_sft(cfg, prepare_tasks(cfg), Path(args.out), on_step=on_step)
    print(f"{info['samples']} expert samples, {info['model_tokens']} model tokens; "
          f"loss {info['loss_first_step']:.4f} -> {info['loss_last_steps']:.4f}; model written to {args.out}")
    return 0


def add_pipeline(p: argparse.ArgumentParser) -> None:
    _config_args(p, "pipeline")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a killed pipeline run from its last finished stage")
    p.add_argument("--run-dir", help="where to write the run (default: runs/<timestamp>)")


def cmd_pipeline(args: argparse.Namespace) -> int:

    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / "config.yaml").is_file():
            return _error(f"{run_dir} is not a pipeline run directory (no config.yaml)")
        if holds_run(run_dir) and not (run_dir / "pipeline.json").exists():  # a pipeline's trainer writes rl/
            return _error(f"{run_dir} is an eppo-train run, not a pipeline run; resume it with: "
                          f"{PROG} --resume {shlex.quote(str(run_dir))}")
        cfg = _load(args, saved=run_dir / "config.yaml")
    else:
        cfg = _load(args)
        run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(cfg)
    if cfg.rollout.group_size < 2:  # found by the RL stage only after the evaluation and SFT stages
        return _error(_one_sample_groups(cfg.rollout.group_size))
    if cfg.env.action_format == "tools" and not args.resume:
        _check_model(cfg)  # a template without tools now, not after the base model's evaluation

    def hint() -> str:
        if (run_dir / "config.yaml").is_file():
            return f'resume with: make train ARGS="--resume {run_dir}"'
        return "nothing to resume yet; start again with: make train"

    _hint_fn[:] = [hint]
    out = run_pipeline(cfg, run_dir, resume=bool(args.resume))
    print((out / "summary.md").read_text())
    print(f"run written to {out}")
    return 0


# ---------------------------------------------------------------- signal
def add_signal(p: argparse.ArgumentParser) -> None:
    _config_args(p, "pipeline")
    p.add_argument("--temperatures", default="1.0", help="comma list of sampling temperatures (default: 1.0)")
    p.add_argument("--sampling", action="append", default=[], metavar="T[,top_p=P][,min_p=M]",
                   help="a sampling setting to compare (repeatable; replaces --temperatures), e.g. 1.0,top_p=0.9")
    p.add_argument("--k", default="", help="comma list of k: also report rescue@k, the chance that one of k samples "
                   "wins an instance the greedy reply loses (e.g. 8,32; max(k) samples a problem)")
    p.add_argument("--batches", type=int, default=2, help="RL batches played at each temperature (default: 2)")
    p.add_argument("--eval", action="store_true",
                   help="play the pipeline's fixed evaluation set (evaluation.episodes instances a task, "
                   "rollout.group_size samples each) instead of RL batches")


def _setting(text: str) -> Setting:
    """`T[,top_p=P][,min_p=M]` as a Setting (ValueError naming what is wrong)."""
    first, *rest = [part.strip() for part in text.split(",")]
    try:
        values = {"temperature": float(first)}
        for part in rest:
            key, _, value = part.partition("=")
            if key not in ("top_p", "min_p"):
                raise ValueError(f"unknown {key!r} in {text!r} (top_p, min_p)")
            values[key] = float(value)
    except ValueError as exc:
        raise ValueError(str(exc) if "unknown" in str(exc) else f"{text!r} is not T[,top_p=P][,min_p=M]") from None
    setting = Setting(**values)
    if not (setting.temperature > 0 and 0 < setting.top_p <= 1 and 0 <= setting.min_p < 1):
        raise ValueError(f"{text!r}: need T > 0, 0 < top_p <= 1, 0 <= min_p < 1")
    return setting


def cmd_signal(args: argparse.Namespace) -> int:

    try:
        temperatures = [float(t) for t in args.temperatures.split(",")]
    except ValueError:
        return _error(f"--temperatures: a comma list of numbers, got {args.temperatures!r}")
    if any(t <= 0 for t in temperatures) or args.batches < 1:
        return _error("--temperatures must be > 0 and --batches at least 1")
    settings: list[float | Setting] = list(temperatures)
    if args.sampling:
        try:
            settings = [_setting(text) for text in args.sampling]
        except ValueError as exc:
            return _error(f"--sampling: {exc}")
    try:
        ks = tuple(int(k) for k in args.k.split(",")) if args.k else ()
    except ValueError:
        return _error(f"--k: a comma list of whole numbers, got {args.k!r}")
    if any(k < 1 for k in ks):
        return _error("--k: each k must be at least 1")
    cfg = _load(args)

    _check_model(cfg)  # a wrong --model now, not after the tasks' set-up (~10-20 s: ALFWorld, WebShop)
    # One engine pass can take minutes on CPU: the agent loop's ticks give episodes done, tokens/s and a heartbeat
    progress = Progress(["signal"], [])
    progress.start("signal")
    try:
        with listen(progress.ticks("episodes")):
            rows = (measure_eval(cfg, settings, progress.note, ks) if args.eval
                    else measure(cfg, settings, args.batches, progress.note, ks))
    finally:
        progress.stop()
    print(table(rows))
    return 0


# ---------------------------------------------------------------- plan
def add_plan(p: argparse.ArgumentParser) -> None:
    _config_args(p, "default")
    p.add_argument("--gpus", type=int, default=1, help="learner ranks, one GPU each (default 1)")
    p.add_argument("--lora", action="store_true",
                   help="with LoRA adapters (the config's learner.lora, or r=16 on every projection)")
    p.add_argument("--gpu-memory", type=float, default=80.0, metavar="GIB", help="memory per GPU (default 80)")
    p.add_argument("--cpu", action="store_true", help="a CPU learner (fp32 compute, the process's own RSS)")


def cmd_plan(args: argparse.Namespace) -> int:
    """Per-rank memory of the learner from the model's config.json alone, and whether it fits."""
    model = args.model or "default"
    args.model = None  # the config is read for its batch and learner settings; the model may have no weights here
    cfg = _load(args)
    if args.gpus < 1:
        return _error("--gpus must be at least 1")
    try:
        shape, source = read_shape(model)
    except ValueError as exc:
        return _error(str(exc))
    lc, lora = cfg.learner, cfg.learner.lora
    r = lora.r or (16 if args.lora else 0)
    episodes = sum(t.problems for t in cfg.env.tasks) * cfg.rollout.group_size
    engines = cfg.generator.engines
    device = "cpu" if args.cpu else "cuda"
    p = size_plan(shape, args.gpus, device=device, lora_r=r, lora_targets=list(lora.target_modules),
                  micro_batch_tokens=lc.micro_batch_tokens, logit_chunk=lc.logit_chunk,
                  checkpointing=lc.activation_checkpointing, master_bytes=4 if cfg.model.dtype == "float32" else 2,
                  reference=cfg.algo.kl_coef > 0, top_layers=lc.train_top_layers,
                  engine_tokens=-(-episodes // engines) * cfg.rollout.max_total_tokens, model=f"{model} ({source})")
    print(render(p, args.gpu_memory, engines))
    return 0


# ---------------------------------------------------------------- study, study-report


def add_study(p: argparse.ArgumentParser) -> None:
    _config_args(p, None, "every committed study in order: " + ", ".join(s.config for s in OFFICIAL))
    p.add_argument("--quick", action="store_true", help="the tiny-model study (config study-quick): minutes")
    p.add_argument("--algos", help="comma list of losses (default: grpo,dapo,eppo,clip_cov; quick: grpo,dapo,eppo)")
    p.add_argument("--seeds", type=int, default=None,
                   help="seeds 0..N-1 per loss (default: the study's own, e.g. 10 on the testbed, 3 on the suite)")
    p.add_argument("--ablations", default=None,
                   help="comma list of EPPO ablations, 'all' or 'none' (default: the study's own; quick: none)")
    p.add_argument("--ablation-seeds", type=int, default=None, help="seeds per ablation (default: the study's own)")
    p.add_argument("--sft", metavar="DIR", help="start every run from this model folder (e.g. a make-train "
                   "run's sft/) instead of the config's cached SFT warm start")
    p.add_argument("--out", help="scratch folder for the runs (default: runs/study-<config name>)")
    p.add_argument("--results", help="result files (default: docs/results/study/<study> for a committed study "
                   "without --set or --model, else <out>/results)")
    p.add_argument("--report", help="the report (default: docs/results/study.md for the committed studies, else "
                   "<out>/study.md)")


def _study_plan(args: argparse.Namespace, study: OfficialStudy | None) -> list | int:
    from eppo_train.algos.losses import LOSSES

    algos = args.algos.split(",") if args.algos else list(DEFAULT_ALGOS[:3] if args.quick else DEFAULT_ALGOS)
    unknown = [a for a in algos if a not in LOSSES]
    if unknown:
        return _error(f"--algos: unknown loss {unknown[0]!r} (known: {', '.join(LOSSES)})")
    seeds = args.seeds if args.seeds is not None else study.seeds if study else 3
    ablation_seeds = (args.ablation_seeds if args.ablation_seeds is not None
                      else study.ablation_seeds if study and study.ablation_seeds else 1)
    if seeds < 1 or ablation_seeds < 1:
        return _error("--seeds and --ablation-seeds must be at least 1")
    default = "none" if args.quick or (study and not study.ablations) else "all"
    spec = args.ablations if args.ablations is not None else default
    ablations = [] if spec == "none" else list(ABLATIONS) if spec == "all" else spec.split(",")
    return make_plan(algos, seeds, ablations, ablation_seeds)


def cmd_study(args: argparse.Namespace) -> int:
    if args.config is None and not args.quick:  # `make experiment`: every committed study, in order
        studies = list(OFFICIAL)
    else:
        config = "study-quick" if args.quick and args.config is None else args.config
        studies = [official(config) or OfficialStudy(Path(config).stem, config, config, 3, 1)]
    for study in studies:
        cfg = _load(args, study.config)
        committed = official(study.config) is not None and not args.model and not args.overrides
        plan = _study_plan(args, study if committed else None)
        if isinstance(plan, int):
            return plan
        out = Path(args.out) if args.out else Path("runs") / f"study-{Path(study.config).stem}"
        results = Path(args.results) if args.results else study.results if committed else out / "results"
        report = Path(args.report) if args.report else STUDY_REPORT if committed else out / "study.md"
        sections = [(s.title, s.results) for s in OFFICIAL] if committed and not args.results else [
            (study.title, results)]
        try:
            path = run_study(cfg, plan, StudyPaths(out, results, report), f"{PROG} {shlex.join(_argv)}", args.sft,
                             sections=sections)
        except ResultError as exc:
            return _error(str(exc))
        print(f"report written to {path}")
    return 0


def add_study_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default=None,
                   help="one study's result files (default: every committed study under docs/results/study/)")
    p.add_argument("--out", default=None, help="the report (default: docs/results/study.md; with --results, "
                   "study.md beside the results folder)")


def cmd_study_report(args: argparse.Namespace) -> int:
    if args.results:
        results = Path(args.results)
        sections = [(results.name, results)]
        # where `eppo-train study` writes it: <out>/results -> <out>/study.md
        out = Path(args.out) if args.out else results.parent / "study.md"
    else:
        sections = [(s.title, s.results) for s in OFFICIAL]
        out = Path(args.out) if args.out else STUDY_REPORT
    try:
        path = write_report(sections, out)
    except ResultError as exc:
        return _error(str(exc))
    print(f"report written to {path}")
    return 0


SUBCOMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "train": ("train a policy (the default command)", add_train, cmd_train),
    "config": ("print the resolved config, or with --explain [KEY] what each setting means", add_config,
               cmd_config),
    "plot": ("write PNG plots of a run's metrics", add_plot, cmd_plot),
    "sft": ("supervised warm start on expert trajectories of every configured task", add_sft, cmd_sft),
    "study": ("losses x seeds (+ EPPO ablations) on one suite, one result file per run, resumable "
              "(make experiment)", add_study, cmd_study),
    "study-report": ("rebuild the study report and figures from its result files (make study-report)",
                     add_study_report, cmd_study_report),
    "pipeline": ("evaluate, SFT, evaluate, RL, evaluate; writes summary.md (make train)", add_pipeline,
                 cmd_pipeline),
    "plan": ("memory per learner rank from a model's config alone (weights, gradients, AdamW, activations, KV "
             "cache) and whether it fits", add_plan, cmd_plan),
    "signal": ("the share of GRPO groups with reward variance a model's rollouts give, per task and temperature",
               add_signal, cmd_signal),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Multi-task agentic RL (EPPO, GRPO, DAPO, ...).")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add, run) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        add(p)
        p.set_defaults(run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["train", *argv]
    args = build_parser().parse_args(argv)

    _argv[:] = argv
    _hint_fn.clear()
    again = f"run the same command again: {PROG} " + shlex.join(argv)  # sft, study: a rerun skips finished work
    def hint() -> str:
        return _hint_fn[0]() if _hint_fn else again

    with guard(PROG, hint):
        try:
            status = args.run(args)
            sys.stdout.flush()  # here, not at the interpreter's exit: a closed pipe is then caught below
            return status
        except BrokenPipeError:  # the reader went away (`eppo-train plot runs/x | head -1`): stop quietly
            return stdout_closed()
        except (ConfigError, RunError, ModelNotFoundError, EngineError, FileNotFoundError, TaskError) as exc:
            return _error(str(exc))
        except WorkerLost as exc:  # not the user's error: the run stops at its last checkpoint
            print(lost_line(PROG, str(exc), hint()), file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
