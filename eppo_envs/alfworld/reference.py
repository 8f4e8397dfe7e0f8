"""The stock ALFWorld text env as a yardstick: the same game files, the same commands, alfworld's own stack.

`compare_throughput` plays our expert on `episodes` instances (timing the planner on its own: the planner is not
the env), writes those games as game files, then replays each episode's commands through `textworld.gym` with
alfworld's wrappers (`AlfredDemangler`, `AlfredInfos`; no `AlfredExpert`, which needs `traj_data.json`), the stack
`AlfredTWEnv.init_env` builds, and through `eppo/ALFWorld-v0` three times: `cold` (no cache at all: each reset
translates its game, as the first time a game is ever played on a machine), `disk` (a new process: nothing in
memory, the translation read from the disk cache) and `warm` (the games seen before in this process, as in RL where
a game is reset many times). Resets and steps are timed apart.

    python -m eppo_envs.alfworld.reference --episodes 20
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import textworld
import textworld.gym
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
from textworld.gym.envs.textworld_batch import TextworldBatchGymEnv

import eppo_envs
from eppo_envs.alfworld.fastpddl import clear_caches
from eppo_envs.alfworld.translation import cached_translation

CACHE_STATES = ("cold", "disk", "warm")


@dataclass
class Replay:
    """One replay of every game: resets (each one loads its game) and steps, timed apart."""

    episodes: int = 0
    steps: int = 0
    won: int = 0
    reset_s: float = 0.0
    step_s: float = 0.0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.step_s if self.step_s else 0.0

    @property
    def resets_per_s(self) -> float:
        return self.episodes / self.reset_s if self.reset_s else 0.0

    def summary(self) -> dict[str, Any]:
        return {**asdict(self), "steps_per_s": self.steps_per_s, "resets_per_s": self.resets_per_s}


@dataclass
class ExpertRun:
    played: list[tuple[dict[str, Any], list[str]]]  # (game file, the expert's commands)
    planner_s: float  # time inside expert_action (planning), summed
    env_s: float  # time inside reset and step, summed
    steps: int


def play_expert(split: str, episodes: int, first_seed: int = 0, engine: str = "fast") -> ExpertRun:
    """The expert on seeds first_seed.., its planner's time apart from the env's; games read from our source."""
    import eppo_envs.alfworld  # noqa: F401  (registers the id)

    env = eppo_envs.make("eppo/ALFWorld-v0", engine=engine)
    u = env.unwrapped
    played, planner_s, env_s, steps = [], 0.0, 0.0, 0
    for seed in range(first_seed, first_seed + episodes):
        t0 = time.perf_counter()
        env.reset(seed=seed, options={"split": split})
        env_s += time.perf_counter() - t0
        commands: list[str] = []
        done = False
        while not done:
            t0 = time.perf_counter()
            action = u.expert_action()
            t1 = time.perf_counter()
            _, _, terminated, truncated, info = env.step(action)
            env_s += time.perf_counter() - t1
            planner_s += t1 - t0
            steps += 1
            done = terminated or truncated
            if "command" in info:
                commands.append(info["command"])
        game = u.game.game
        if isinstance(game, str):
            game = json.loads(Path(game).read_text())
        played.append((game, commands))
    env.close()
    return ExpertRun(played, planner_s, env_s, steps)


def stock_replay(games: list[tuple[Path, list[str]]], max_episode_steps: int = 50) -> Replay:
    """Replay each game's commands through textworld.gym + alfworld's wrappers."""
    request_infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    commands = {str(path): cmds for path, cmds in games}
    env = TextworldBatchGymEnv([str(p) for p, _ in games], request_infos, batch_size=1, asynchronous=False,
                               max_episode_steps=max_episode_steps,
                               wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])
    out = Replay()
    for _ in games:
        t0 = time.perf_counter()
        _, infos = env.reset()
        out.reset_s += time.perf_counter() - t0
        out.episodes += 1
        t0 = time.perf_counter()
        for command in commands[infos["extra.gamefile"][0]]:
            _, _, dones, infos = env.step([command])
            out.steps += 1
            if dones[0]:
                break
        out.step_s += time.perf_counter() - t0
        out.won += bool(infos["won"][0])
    env.close()
    return out


@contextmanager
def _disk_cache(enabled: bool) -> Iterator[None]:
    old = os.environ.get("EPPO_ALFWORLD_DISK_CACHE")
    os.environ["EPPO_ALFWORLD_DISK_CACHE"] = "1" if enabled else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("EPPO_ALFWORLD_DISK_CACHE", None)
        else:
            os.environ["EPPO_ALFWORLD_DISK_CACHE"] = old


def ours_replay(games: list[tuple[Path, list[str]]], cache: str = "cold", engine: str = "fast") -> Replay:
    """The same replay through `eppo/ALFWorld-v0` (official-data mode on the same files). `cache`: "cold" (memory
    and disk caches unused), "disk" (memory emptied, translations on disk) or "warm" (whatever memory holds)."""
    if cache not in CACHE_STATES:
        raise ValueError(f"cache must be one of {CACHE_STATES}, not {cache!r}")
    if cache == "disk":
        for path, _ in games:  # untimed: make sure the disk holds every translation
            data = json.loads(path.read_text())
            cached_translation(data["pddl_domain"], data["pddl_problem"])
    if cache != "warm":
        clear_caches()
    with _disk_cache(cache != "cold"):
        return _replay(games, engine)


def _replay(games: list[tuple[Path, list[str]]], engine: str) -> Replay:
    root = games[0][0].parents[4]  # <root>/json_2.1.1/<split>/<task>/<trial>/game.tw-pddl
    split = games[0][0].parents[2].name
    env = eppo_envs.make("eppo/ALFWorld-v0", data_path=str(root), split=split, engine=engine)
    index_of = {path: i for i, (path, _) in enumerate(env.unwrapped.source._games(split))}
    out = Replay()
    for path, cmds in games:
        t0 = time.perf_counter()
        env.reset(options={"index": index_of[str(path)]})
        out.reset_s += time.perf_counter() - t0
        out.episodes += 1
        info: dict[str, Any] = {"won": False}
        t0 = time.perf_counter()
        for command in cmds:
            _, _, terminated, truncated, info = env.step(f"<action>{command}</action>")
            out.steps += 1
            if terminated or truncated:
                break
        out.step_s += time.perf_counter() - t0
        out.won += bool(info["won"])
    env.close()
    return out


def write_games(played: list[tuple[dict[str, Any], list[str]]], root: Path, split: str) -> list[tuple[Path, list[str]]]:
    """Game files laid out as official ALFWorld data (what both replays read)."""
    games = []
    for i, (game, cmds) in enumerate(played):
        folder = root / "json_2.1.1" / split / f"{game.get('task_type', 'game')}-{i}" / "trial_0"
        folder.mkdir(parents=True)
        (folder / "game.tw-pddl").write_text(json.dumps(game))
        games.append((folder / "game.tw-pddl", cmds))
    return games


def compare_throughput(split: str = "valid_unseen", episodes: int = 20, first_seed: int = 0) -> dict[str, Any]:
    """Steps/s and resets/s of ours (cold and warm) and of the stock wrapper, same games and commands."""
    expert = play_expert(split, episodes, first_seed)
    with tempfile.TemporaryDirectory(prefix="alfworld-ref-") as tmp:
        games = write_games(expert.played, Path(tmp), split)
        stock = stock_replay(games)
        ours = {cache: ours_replay(games, cache) for cache in CACHE_STATES}
    out: dict[str, Any] = {"split": split, "episodes": episodes,
                           "expert": {"planner_s": expert.planner_s, "env_s": expert.env_s, "steps": expert.steps},
                           "stock": stock.summary()}
    for cache, replay in ours.items():
        out[f"ours_{cache}"] = replay.summary()
        out[f"steps_ratio_{cache}"] = replay.steps_per_s / stock.steps_per_s
        out[f"resets_ratio_{cache}"] = replay.resets_per_s / stock.resets_per_s
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="valid_unseen")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = compare_throughput(args.split, args.episodes, args.seed)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
