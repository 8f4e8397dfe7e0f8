"""The stock ALFWorld text env as a yardstick: the same game files, the same commands, alfworld's own stack.

`compare_throughput` plays our expert on `episodes` instances, writes those games as game files, then replays each
episode's commands twice: through `eppo/ALFWorld-v0`, and through `textworld.gym` with alfworld's wrappers
(`AlfredDemangler`, `AlfredInfos`; no `AlfredExpert`, which needs `traj_data.json`), the stack `AlfredTWEnv.init_env`
builds. Both timings include each episode's reset, so the ratio compares like with like.

    python -m eppo_envs.alfworld.reference --episodes 20
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import textworld
import textworld.gym
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
from textworld.gym.envs.textworld_batch import TextworldBatchGymEnv

import eppo_envs
from eppo_envs.core import expert_policy, play_episode


def expert_commands(split: str, episodes: int, first_seed: int = 0) -> list[tuple[dict[str, Any], list[str]]]:
    """(game file, the expert's commands) for seeds first_seed..; games are read from our env's source."""
    import eppo_envs.alfworld  # noqa: F401  (registers the id)

    env = eppo_envs.make("eppo/ALFWorld-v0")
    out = []
    for seed in range(first_seed, first_seed + episodes):
        episode = play_episode(env, expert_policy(env), seed=seed, split=split)
        game = env.unwrapped.game.game
        if isinstance(game, str):
            game = json.loads(Path(game).read_text())
        out.append((game, [turn.info["command"] for turn in episode.turns if "command" in turn.info]))
    env.close()
    return out


def stock_steps_per_second(games: list[tuple[Path, list[str]]], max_episode_steps: int = 50) -> dict[str, Any]:
    """Replay each game's commands through textworld.gym + alfworld's wrappers; steps/s including resets."""
    request_infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    commands = {str(path): cmds for path, cmds in games}
    env = TextworldBatchGymEnv([str(p) for p, _ in games], request_infos, batch_size=1, asynchronous=False,
                               max_episode_steps=max_episode_steps,
                               wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])
    steps = won = 0
    start = time.perf_counter()
    for _ in games:
        _, infos = env.reset()
        for command in commands[infos["extra.gamefile"][0]]:
            _, _, dones, infos = env.step([command])
            steps += 1
            if dones[0]:
                break
        won += bool(infos["won"][0])
    elapsed = time.perf_counter() - start
    env.close()
    return {"steps": steps, "won": won, "episodes": len(games), "steps_per_s": steps / elapsed}


def ours_steps_per_second(games: list[tuple[Path, list[str]]]) -> dict[str, Any]:
    """The same replay through `eppo/ALFWorld-v0` (official-data mode on the same files)."""
    root = games[0][0].parents[4]  # <root>/json_2.1.1/<split>/<task>/<trial>/game.tw-pddl
    split = games[0][0].parents[2].name
    env = eppo_envs.make("eppo/ALFWorld-v0", data_path=str(root), split=split)
    index_of = {path: i for i, (path, _) in enumerate(env.unwrapped.source._games(split))}
    steps = won = 0
    start = time.perf_counter()
    for path, cmds in games:
        env.reset(options={"index": index_of[str(path)]})
        info: dict[str, Any] = {"won": False}
        for command in cmds:
            _, _, terminated, truncated, info = env.step(f"<action>{command}</action>")
            steps += 1
            if terminated or truncated:
                break
        won += bool(info["won"])
    elapsed = time.perf_counter() - start
    env.close()
    return {"steps": steps, "won": won, "episodes": len(games), "steps_per_s": steps / elapsed}


def compare_throughput(split: str = "valid_unseen", episodes: int = 20, first_seed: int = 0) -> dict[str, Any]:
    """Our steps/s, the stock wrapper's steps/s and their ratio, on the same games and commands."""
    played = expert_commands(split, episodes, first_seed)
    with tempfile.TemporaryDirectory(prefix="alfworld-ref-") as tmp:
        games = []
        for i, (game, cmds) in enumerate(played):
            folder = Path(tmp) / "json_2.1.1" / split / f"{game.get('task_type', 'game')}-{i}" / "trial_0"
            folder.mkdir(parents=True)
            (folder / "game.tw-pddl").write_text(json.dumps(game))
            games.append((folder / "game.tw-pddl", cmds))
        stock = stock_steps_per_second(games)
        ours = ours_steps_per_second(games)
    return {"split": split, "episodes": episodes, "ours": ours, "stock": stock,
            "ratio": ours["steps_per_s"] / stock["steps_per_s"]}


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
