"""Differential check: the fast engine against the stock one (TextWorld's `PddlEnv` + alfworld's `AlfredDemangler`).

Each trajectory plays one game in both engines, comparing the feedback text, the admissible command list (order
included) and `won` after the reset and after every step. The first trajectory of a game follows the planner's
solution with look/inventory/examine and inadmissible commands mixed in (so it ends in a win, through the
heat/cool/clean/use/move commands a random walk seldom reaches); the others are seeded random walks: mostly
admissible commands, some made-up or slightly wrong ones (which must give "Nothing happens." and change nothing).

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

from eppo_envs.alfworld.engine import AlfredEngine
from eppo_envs.alfworld.fastpddl import FastAlfredGame
from eppo_envs.alfworld.generator import export_games, game_file, load_specs, render_problem
from eppo_envs.alfworld.translation import ArgvGuard

SPLITS = ("train", "valid_seen", "valid_unseen")
_WRONG = ("look around", "go to the moon", "take all", "open door 1", "inventory please", "", "  look  ", "examine")


class StockEngine:
    """The oracle: exactly the stack alfworld's `AlfredTWEnv` builds (no caching of ours anywhere)."""

    def __init__(self) -> None:
        self._pddl = PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True))
        self._env = AlfredDemangler(self._pddl, shuffle=False)

    def start(self, game: str | dict[str, Any] | None) -> tuple[str, list[str], bool]:
        """Load `game` and reset; None: reset the loaded game again."""
        with ArgvGuard():
            if game is not None:
                self._env.load(game)
            state = self._env.reset()
        return state.feedback, list(state["admissible_commands"]), bool(state["won"])

    def step(self, command: str) -> tuple[str, list[str], bool]:
        state, _, _ = self._env.step(command)
        return state.feedback, list(state["admissible_commands"]), bool(state["won"])


class FastEngine:
    def __init__(self) -> None:
        self._game = FastAlfredGame()

    def start(self, game: str | dict[str, Any] | None) -> tuple[str, list[str], bool]:
        if game is not None:
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


def _noise(rng: random.Random, admissible: list[str]) -> str:
    """A command that changes nothing the goal depends on: inadmissible, or look / inventory / examine."""
    harmless = [c for c in admissible if c in ("look", "inventory") or c.startswith("examine ")]
    if harmless and rng.random() < 0.5:
        return rng.choice(harmless)
    return rng.choice(_WRONG)


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


def _timed_pair(report: DiffReport, stock_call, fast_call) -> tuple[Any, Any]:
    """Run the stock engine's call, then ours, adding each one's seconds to the report."""
    t0 = time.perf_counter()
    s = stock_call()
    t1 = time.perf_counter()
    f = fast_call()
    report.stock_s += t1 - t0
    report.fast_s += time.perf_counter() - t1
    return s, f


def play(report: DiffReport, stock: StockEngine, fast: FastEngine, game: str | dict[str, Any] | None, label: str,
         rng: random.Random, steps: int, plan: list[str] | None = None) -> None:
    """One trajectory through both engines (`game` None: the loaded one, reset); stops at the first difference.
    With `plan`, its commands are played in order, each preceded by a harmless one a quarter of the time."""
    plan = list(plan) if plan is not None else None
    s, f = _timed_pair(report, lambda: stock.start(game), lambda: fast.start(game))
    report.trajectories += 1
    if not _compare(report, f"{label} reset", s, f):
        return
    for i in range(steps if plan is None else 2 * len(plan) + 5):
        if plan is None:
            command = _command(rng, s[1])
        elif plan and rng.random() >= 0.25:
            command = plan.pop(0)
        else:
            command = _noise(rng, s[1])
        report.inadmissible += command.strip() not in s[1]
        s, f = _timed_pair(report, lambda c=command: stock.step(c), lambda c=command: fast.step(c))
        report.steps += 1
        if not _compare(report, f"{label} step {i} {command!r}", s, f):
            return
        if s[2]:
            report.wins += 1
            return


def run(trajectories: int, steps: int = 30, seed: int = 0, per_game: int = 1, files_every: int = 3,
        log_every: int = 0) -> DiffReport:
    """`trajectories` random walks, `per_game` of them on each game (load once, then reset: the stock engine's
    load is its costliest part). Games cycle the six task types and the three splits so that every (split, type)
    pair comes up within 18 games; every `files_every`-th game is played from an official-format game file on disk
    (ALFWorld's json_2.1.1 layout), the others from the game dict."""
    rng = random.Random(seed)
    report = DiffReport()
    stock, fast, planner = StockEngine(), FastEngine(), AlfredEngine("fast")
    n_games = -(-trajectories // per_game)
    with tempfile.TemporaryDirectory(prefix="alfworld-diff-") as tmp:
        for n in range(n_games):
            split = SPLITS[(n + n // 6) % len(SPLITS)]
            specs = load_specs(split)
            index = rng.randrange(len(specs) // 6) * 6 + n % 6  # spec lists alternate the six types (index % 6)
            spec = specs[index]
            if files_every and n % files_every == 0:
                game: str | dict[str, Any] = str(export_games([spec], Path(tmp) / f"t{n}", split)[0])
                report.kinds.add("file")
            else:
                game = game_file(spec, f"{split}_{index}")
                report.kinds.add("dict")
            report.task_types.add(spec.task_type)
            report.splits.add(split)
            if log_every and n % log_every == 0:
                print(f"[differential] game {n}/{n_games}: {report.trajectories} trajectories, {report.steps} steps, "
                      f"{len(report.differences)} differences", flush=True)
            planner.start(game)
            plan = planner.plan_from_start(render_problem(spec, f"{split}_{index}", focus=True))
            for k in range(min(per_game, trajectories - report.trajectories)):
                label = f"{split}[{index}] {spec.task_type} #{k}"
                play(report, stock, fast, game if k == 0 else None, label, rng, steps, plan if k == 0 else None)
                if report.differences:
                    return report
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=30)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-game", type=int, default=1, help="trajectories per loaded game")
    args = parser.parse_args(argv)
    report = run(args.trajectories, args.steps, args.seed, args.per_game)
    summary = {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(report).items() if k != "differences"}
    summary["differences"] = len(report.differences)
    print(json.dumps(summary, indent=2))
    for diff in report.differences[:5]:
        print(diff)
    return 1 if report.differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
