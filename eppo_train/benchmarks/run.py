"""`make bench`: throughput of every moving part, each figure the median of several repetitions.

    python -m eppo_train.benchmarks                       # everything (~10-15 min on 2 cores)
    python -m eppo_train.benchmarks --quick --only envs,sandbox
    python -m eppo_train.benchmarks --list

Sections are independent: one that cannot run (a module not built, an optional package missing, an error) becomes a
row saying why, and the others still run. Results go to a rich table and to `bench/results.json` with the date and
the machine. docs/bench.md says what each figure means.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

# Importing the section modules registers them, in this order (cheap ones first).
from eppo_train.benchmarks import envs, memory, model, rollout_engines, tools, trl_ref  # noqa: F401
from eppo_train.benchmarks.common import SECTIONS, BenchContext, Figure, failed
from eppo_train.benchmarks.envs import registered_envs
from eppo_train.policy.models import ModelNotFoundError, resolve_model
from eppo_train.runtime import interrupt
from eppo_train.runtime.interrupt import guard

console = Console(width=None if sys.stdout.isatty() else 220)


def machine() -> dict:
    """Cores, CPU model, GPU (if any) and the load when the bench started: figures mean little without them."""
    cpu = platform.machine()  # not platform.processor(): it runs `uname -p` in a child, outside any Ctrl-C guard
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = None
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "gpu": gpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch_version,
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def run_sections(names: list[str], ctx: BenchContext) -> tuple[list[Figure], dict[str, float]]:

    figures: list[Figure] = []
    seconds: dict[str, float] = {}
    for i, name in enumerate(names):
        sec = SECTIONS[name]
        interrupt.set_where(0, f"section {i + 1}/{len(names)} {name}")
        console.print(f"[bold]{name}[/bold]: {sec.title} ...")
        t0 = time.perf_counter()
        try:
            rows = sec.run(ctx)
        except Exception as exc:  # noqa: BLE001  (one section's failure must not end the bench)
            rows = [failed(name, sec.title, "", f"--only {name}", exc)]
        seconds[name] = round(time.perf_counter() - t0, 1)
        for row in rows:
            shown = f"{row.value:,.3g} {row.unit}" if row.ok else f"[red]{row.error}[/red]"
            console.print(f"  {row.name}: {shown}")
        figures += rows
    return figures, seconds


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def table(figures: list[Figure], reps_note: str) -> Table:
    t = Table(title=f"EPPO bench (median of {reps_note})", show_lines=False)
    for column, justify in (("section", "left"), ("figure", "left"), ("median", "right"), ("unit", "left"),
                            ("reps", "right"), ("how", "left")):
        t.add_column(column, justify=justify, overflow="fold")
    for f in figures:
        value = _fmt(f.value) if f.ok else "[red]n/a[/red]"
        how = f.how if f.ok else f"[red]{f.error}[/red]" + (f" ({f.how})" if f.how else "")
        t.add_row(f.section, f.name, value, f.unit, str(len(f.samples)) if f.ok else "-", how)
    return t


def write_json(path: Path, figures: list[Figure], seconds: dict[str, float], args: argparse.Namespace,
               command: str, info: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "quick": args.quick,
        "model": args.model,
        "envs_filter": args.envs,
        "machine": info,
        "section_seconds": seconds,
        "figures": [asdict(f) for f in figures],
    }
    path.write_text(json.dumps(data, indent=2) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="eppo-bench", description="Throughput of envs, tools, rollout and learner.")
    parser.add_argument("--quick", action="store_true", help="one repetition, small workloads (a smoke test)")
    parser.add_argument("--reps", type=int, default=None, metavar="N",
                        help="repetitions of every section's full workload (default 3; 1 with --quick)")
    parser.add_argument("--only", default="", help=f"comma-separated sections: {','.join(SECTIONS)}")
    parser.add_argument("--skip", default="", help="comma-separated sections to leave out")
    parser.add_argument("--model", default="default", help="model of the rollout/learner/trl sections (default: "
                        "the embedded SmolLM2-135M-Instruct; 'tiny' for a smoke test)")
    parser.add_argument("--envs", default="", help="comma-separated substrings: only matching env ids in the envs "
                        "and rollout sections (e.g. ALFWorld,WebShop-v0)")
    parser.add_argument("--out", default="bench/results.json", help="where the JSON goes")
    parser.add_argument("--list", action="store_true", help="list the sections and exit")
    return parser.parse_args(argv)


def context(args: argparse.Namespace) -> BenchContext:
    return BenchContext(quick=args.quick, model=args.model, envs=args.envs, repetitions=args.reps)


def reps_note(ctx: BenchContext) -> str:
    """The table title's repetitions, as the sections count them (a '--reps 1' table says 'median of 1 run')."""
    reps = ctx.reps()
    return f"{reps} run{'s' if reps > 1 else ''}" + (", --quick" if ctx.quick else "")


MODEL_SECTIONS = ("learner", "sync", "rollout", "trl")
ENV_SECTIONS = ("envs", "rollout")


def check_inputs(names: list[str], ctx: BenchContext) -> str | None:
    """What the user typed that no section can run: a --model that resolves to nothing, an --envs that matches no
    registered env id. One line, before any section starts."""
    if any(n in MODEL_SECTIONS for n in names):

        try:
            resolve_model(ctx.model)
        except ModelNotFoundError as exc:
            return f"--model: {exc}"
    if ctx.envs.strip() and any(n in ENV_SECTIONS for n in names):

        known = registered_envs()[0]
        if not any(ctx.wants_env(e) for e in known):
            return f"--envs {ctx.envs}: matches no registered env id ({', '.join(sorted(known))})"
    return None


def main(argv: list[str] | None = None) -> int:
    # Kept now: some env packages rewrite sys.argv when imported, and the load is what the bench starts under.
    argv_ = list(sys.argv[1:] if argv is None else argv)
    command = "python -m eppo_train.benchmarks " + " ".join(argv_)
    args = parse_args(argv_)
    out = Path(args.out)
    if args.list:
        for sec in SECTIONS.values():
            console.print(f"{sec.name:14} {sec.title} (~{sec.cost})")
        return 0
    wanted = [s.strip() for s in args.only.split(",") if s.strip()] or list(SECTIONS)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = [s for s in [*wanted, *skip] if s not in SECTIONS]
    if unknown:
        console.print(f"[red]unknown section(s): {', '.join(unknown)}[/red]; known: {', '.join(SECTIONS)}", soft_wrap=True)
        return 2
    if args.reps is not None and args.reps < 1:  # 0 would make every figure a ZeroDivisionError, exit 0
        console.print(f"[red]--reps must be at least 1[/red], got {args.reps}")
        return 2
    names = [s for s in wanted if s not in skip]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    # Ctrl-C or SIGTERM mid-section: one line and exit 130 instead of a traceback, the section's engines, browsers,
    # sandboxes and Ray stopped (guard's cleanup), and the last results file left as it was (nothing is written
    # before every section has run). The set-up is guarded too: torch's import takes seconds under load.
    hint = f"{out} not written; rerun with: make bench" + (f' ARGS="{shlex.join(argv_)}"' if argv_ else "")
    with guard("eppo-bench", lambda: hint):
        ctx = context(args)
        problem = check_inputs(names, ctx)
        if problem:  # else a typo runs every section as an n/a row, exit 0, replacing the last results file
            console.print(f"[red]{problem}[/red]", soft_wrap=True)  # one line at any terminal width
            return 2
        info = machine()
        figures, seconds = run_sections(names, ctx)
    console.print(table(figures, reps_note(ctx)))
    console.print(f"machine: {info['cores']} cores, {info['cpu']}, GPU: {info['gpu'] or 'none'}, "
                  f"load at start {info['load_avg_1m']:.1f}; section seconds: {seconds}")
    write_json(out, figures, seconds, args, command, info)
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
