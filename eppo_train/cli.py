"""`eppo-train`: train (the default when only flags are given) and plot. A thin dispatcher: each subcommand is an
`add_<name>` (its arguments) and a `cmd_<name>` (the work), registered in `SUBCOMMANDS`.

    eppo-train --config tiny --set algo.name=grpo --set rollout.group_size=4
    eppo-train --resume runs/tiny
    eppo-train plot runs/tiny
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

PROG = "eppo-train"


def _error(msg: str) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 2


# ---------------------------------------------------------------- train
def add_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="a shipped config name (tiny, default) or a YAML path")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, e.g. --set algo.name=grpo (repeatable)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its latest checkpoint")
    p.add_argument("--ray-address", help="join a Ray cluster (e.g. auto or host:6379) instead of a local Ray")


def cmd_train(args: argparse.Namespace) -> int:
    from eppo_train.config import load_config
    from eppo_train.trainer import train

    overrides = list(args.overrides)
    if args.ray_address:
        overrides += [f"ray.address={args.ray_address}", "ray.enabled=true"]
    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / "config.yaml").is_file():
            return _error(f"{run_dir} is not a run directory (no config.yaml)")
        # the saved config, with the run's location pinned to where it is now
        overrides = [f"run.out_dir={run_dir.parent}", f"run.name={run_dir.name}", *overrides]
        cfg = load_config(str(run_dir / "config.yaml"), overrides)
    else:
        cfg = load_config(args.config, overrides)
    out = train(cfg, resume=bool(args.resume))
    print(f"run written to {out}")
    return 0


# ---------------------------------------------------------------- plot
def add_plot(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory (runs/<name>)")


def cmd_plot(args: argparse.Namespace) -> int:
    from eppo_train.plots import plot_run

    for path in plot_run(args.run_dir):
        print(path)
    return 0


SUBCOMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "train": ("train a policy (the default command)", add_train, cmd_train),
    "plot": ("write PNG plots of a run's metrics", add_plot, cmd_plot),
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
    from eppo_train.config import ConfigError
    from eppo_train.policy.models import ModelNotFoundError
    from eppo_train.trainer import RunError

    try:
        return args.run(args)
    except (ConfigError, RunError, ModelNotFoundError, FileNotFoundError) as exc:
        return _error(str(exc))


if __name__ == "__main__":
    sys.exit(main())
