"""Differential check: the fast engine against the stock one (TextWorld's `PddlEnv` + alfworld's `AlfredDemangler`).

Each trajectory loads one game in both engines and plays seeded random commands — mostly admissible ones, some
made-up or slightly wrong ones (which must give "Nothing happens." and change nothing) — comparing the feedback
text, the admissible command list (order included) and `won` after the reset and after every step.

    python -m eppo_envs.alfworld.differential --trajectories 50 --steps 30
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
from textworld.envs import PddlEnv

from eppo_envs.alfworld.fastpddl import FastAlfredGame
from eppo_envs.alfworld.generator import export_games, game_file, load_specs
from eppo_envs.alfworld.translation import ArgvGuard

SPLITS = ("train", "valid_seen", "valid_unseen")
_WRONG = ("look around", "go to the moon", "take all", "open door 1", "inventory please", "", "  look  ", "examine")


class StockEngine:
    """The oracle: exactly the stack alfworld's `AlfredTWEnv` builds (no caching of ours anywhere)."""

    def __init__(self) -> None:
        self._pddl = PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True))
        self._env = AlfredDemangler(self._pddl, shuffle=False)

    def start(self, game: str | dict[str, Any]) -> tuple[str, list[str], bool]:
        with ArgvGuard():
            self._env.load(game)
            state = self._env.reset()
        return state.feedback, list(state["admissible_commands"]), bool(state["won"])

    def step(self, command: str) -> tuple[str, list[str], bool]:
        state, _, _ = self._env.step(command)
        return state.feedback, list(state["admissible_commands"]), bool(state["won"])


class FastEngine:
    def __init__(self) -> None:
        self._game = FastAlfredGame()

    def start(self, game: str | dict[str, Any]) -> tuple[str, list[str], bool]:
        self._game.load(game)
        self._game.reset()
        return self._game.feedback, list(self._game.admissible), self._game.won

    def step(self, command: str) -> tuple[str, list[str], bool]:
        self._game.step(command)
        return self._game.feedback, list(self._game.admissible), self._game.won


@dataclass
class DiffReport:
    trajectories: int = 0
    steps: int = 0
    inadmissible: int = 0
    wins: int = 0
    task_types: set[str] = field(default_factory=set)
    splits: set[str] = field(default_factory=set)
    kinds: set[str] = field(default_factory=set)  # "dict" (generated in memory) / "file" (official-format file)
    differences: list[str] = field(default_factory=list)
    stock_s: float = 0.0
    fast_s: float = 0.0


def _command(rng: random.Random, admissible: list[str]) -> str:
    roll = rng.random()
    if roll < 0.12:
        return rng.choice(_WRONG)
    if roll < 0.18 and admissible:  # near misses: a real command with a wrong number or case
        cmd = rng.choice(admissible)
        return cmd.upper() if rng.random() < 0.5 else cmd + "0"
    return rng.choice(admissible) if admissible else "look"


def _compare(report: DiffReport, where: str, stock: tuple[str, list[str], bool],
             fast: tuple[str, list[str], bool]) -> bool:
    for label, a, b in (("feedback", stock[0], fast[0]), ("admissible", stock[1], fast[1]), ("won", stock[2], fast[2])):
        if a != b:
            report.differences.append(f"{where}: {label} differs:\n  stock={a!r}\n  fast ={b!r}")
            return False
    return True


def play(report: DiffReport, stock: StockEngine, fast: FastEngine, game: str | dict[str, Any], label: str,
         rng: random.Random, steps: int) -> None:
    """One trajectory through both engines; stops at the first difference."""
    t0 = time.perf_counter()
    s = stock.start(game)
    t1 = time.perf_counter()
    f = fast.start(game)
    t2 = time.perf_counter()
    report.stock_s += t1 - t0
    report.fast_s += t2 - t1
    report.trajectories += 1
    if not _compare(report, f"{label} reset", s, f):
        return
    for i in range(steps):
        command = _command(rng, s[1])
        report.inadmissible += command.strip() not in s[1]
        t0 = time.perf_counter()
        s = stock.step(command)
        t1 = time.perf_counter()
        f = fast.step(command)
        t2 = time.perf_counter()
        report.stock_s += t1 - t0
        report.fast_s += t2 - t1
        report.steps += 1
        if not _compare(report, f"{label} step {i} {command!r}", s, f):
            return
        if s[2]:
            report.wins += 1
            return


def run(trajectories: int, steps: int = 30, seed: int = 0, files_every: int = 3) -> DiffReport:
    """`trajectories` random walks over all three splits and six task types; every `files_every`-th game is played
    from an official-format game file on disk (ALFWorld's json_2.1.1 layout), the others from the game dict."""
    rng = random.Random(seed)
    report = DiffReport()
    stock, fast = StockEngine(), FastEngine()
    with tempfile.TemporaryDirectory(prefix="alfworld-diff-") as tmp:
        for n in range(trajectories):
            split = SPLITS[n % len(SPLITS)]
            specs = load_specs(split)
            # Spec lists alternate the six types (index % 6): every (split, type) pair comes up in 18 trajectories.
            index = rng.randrange(len(specs) // 6) * 6 + (n // len(SPLITS)) % 6
            spec = specs[index]
            if files_every and n % files_every == 0:
                game: str | dict[str, Any] = str(export_games([spec], Path(tmp) / f"t{n}", split)[0])
                report.kinds.add("file")
            else:
                game = game_file(spec, f"{split}_{index}")
                report.kinds.add("dict")
            report.task_types.add(spec.task_type)
            report.splits.add(split)
            play(report, stock, fast, game, f"{split}[{index}] {spec.task_type}", rng, steps)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=30)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    report = run(args.trajectories, args.steps, args.seed)
    summary = {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(report).items() if k != "differences"}
    summary["differences"] = len(report.differences)
    print(json.dumps(summary, indent=2))
    for diff in report.differences[:5]:
        print(diff)
    return 1 if report.differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
