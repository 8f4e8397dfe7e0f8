"""`eppo-envs`: list the tasks, look at an instance, play one yourself, run (and time) the experts, serve a task
over OpenEnv."""

from __future__ import annotations

import argparse
import gc
import json
import signal
import sys
from collections.abc import Callable

from rich.markup import escape
from rich.table import Table

import eppo_envs
from eppo_envs.benchmarks.experts import run_expert
from eppo_envs.core import TaskError, first_prompt
from eppo_envs.core.pipes import pipe_console, stdout_closed
from eppo_envs.core.registry import import_tasks, resolve, reward_revision, task_spec

# Piped output (logs, tests) gets wide tables instead of wrapped ids.
console = pipe_console(width=None if sys.stdout.isatty() else 200)


def _at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= `low` (else a negative seed ends in gymnasium's traceback, and 0 or -3
    episodes print a success rate "over -3 episodes")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


SEED, COUNT = _at_least(0), _at_least(1)


def _message(exc: BaseException) -> str:
    """The error's text; a KeyError's str() would wrap it in quotes."""
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def _load_plugins(modules: list[str]) -> None:
    """`--import mylab.tasks` registers a user's own tasks before the command runs."""
    for module in modules:
        import_tasks(module)


def cmd_list(args: argparse.Namespace) -> int:
    table = Table(title="EPPO tasks")
    # "reward": the task's reward revision (AgentEnv.reward_changes), which every evaluation records
    for column in ("id", "task", "max steps", "reward", "splits (instances)", "description"):
        table.add_column(column)
    for env_id in eppo_envs.tasks():
        spec = task_spec(env_id)
        counts = ""
        if not args.no_counts:
            env = eppo_envs.make(env_id)
            unwrapped = env.unwrapped
            counts = ", ".join(f"{s} ({unwrapped.num_instances(s):,})" for s in unwrapped.splits)
            env.close()
        revision = reward_revision(env_id)
        table.add_row(env_id, spec.task, str(spec.max_episode_steps or "-"), "-" if revision is None else f"r{revision}",
                      counts, spec.description)
    console.print(table)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    env = eppo_envs.make(resolve(args.env_id))
    obs, info = env.reset(seed=args.seed, options={"split": args.split} if args.split else None)
    console.print(f"[bold]{escape(info['instance_id'])}[/bold]")
    print(first_prompt(obs, info))
    if info.get("admissible_actions"):
        print("\nAdmissible actions:", ", ".join(info["admissible_actions"]))
    env.close()
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    env = eppo_envs.make(resolve(args.env_id))
    try:
        _play(env, args)
    except KeyboardInterrupt:
        print()  # end the prompt's line: main's "interrupted" then starts a line of its own
        raise
    finally:
        env.close()
    return 0


def _play(env, args: argparse.Namespace) -> None:  # noqa: ANN001  (a gymnasium env)
    unwrapped = env.unwrapped
    obs, info = env.reset(seed=args.seed, options={"split": args.split} if args.split else None)
    print(f"== {info['instance_id']}  (type 'help', 'expert' for the oracle's move, 'quit' to stop)\n")
    print(first_prompt(obs, info))
    total = 0.0
    while True:
        if info.get("admissible_actions"):
            # escaped: WebShop's actions look like markup ("click[back to search]") and rich would eat them
            console.print("[dim]actions: " + escape(", ".join(info["admissible_actions"])) + "[/dim]")
        try:
            line = input("> ")
        except EOFError:  # Ctrl-D: the player is done, like 'quit'. Ctrl-C is an interrupt: main says so, exit 130
            print()
            break
        command = line.strip()
        if command in ("quit", "exit"):
            break
        if command == "help":
            print(unwrapped.action_hint)
            print("Your text is sent to the env as the model's reply; tags you omit are added for a bare command.")
            continue
        if command == "expert":
            line = unwrapped.expert_action()
            print(f"[expert] {line}")
        elif unwrapped.tool_tags and "<" not in line:
            # A person types a bare command; wrap it in the task's first tag, as a model would have written it.
            tag = unwrapped.tool_tags[0]
            line = f"<{tag}>{line}</{tag}>"
        obs, reward, terminated, truncated, info = env.step(line)
        total += reward
        print(obs)
        if terminated or truncated:
            outcome = "won" if info["won"] else ("out of steps" if truncated else "ended")
            print(f"\n== episode {outcome}; total reward {total:g}")
            break


def cmd_expert(args: argparse.Namespace) -> int:
    env_id = resolve(args.env_id)
    result = run_expert(env_id, args.split, args.episodes, args.seed)
    split = result["split"]
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "lost"}))
        return 0
    console.print(
        f"{env_id} (split {split}) expert: success {result['success_rate']:.1%}, mean reward {result['mean_reward']:.3f}, "
        f"mean steps {result['mean_steps']:.1f}, {result['steps_per_s']:.1f} steps/s over {args.episodes} episodes"
    )
    if result["lost"]:
        console.print(f"lost: {escape(', '.join(result['lost'][:20]))}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    table = Table(title=f"expert throughput ({args.episodes} episodes each)")
    for column in ("id", "success", "mean steps", "steps/s"):
        table.add_column(column, justify="right")
    rows = []
    for env_id in eppo_envs.tasks():
        result = run_expert(env_id, args.split, args.episodes)
        rows.append(result)
        table.add_row(env_id, f"{result['success_rate']:.0%}", f"{result['mean_steps']:.1f}", f"{result['steps_per_s']:.1f}")
    console.print(table)
    console.print(f"command: eppo-envs bench --episodes {args.episodes}" + (f" --split {args.split}" if args.split else ""))
    if args.json:
        print(json.dumps(rows))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """`eppo-envs serve ID`: an OpenEnv server for one task (eppo_envs/remote/server.py; docs/interop.md)."""
    try:
        from eppo_envs.remote.server import ServerConfig, serve
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(f"{exc}; `eppo-envs serve` needs the serve extra: pip install -e '.[serve]'") from None
    if args.max_sessions < 1 or not 0 <= args.port < 65536 or args.idle_timeout < 0:
        raise ValueError("--max-sessions must be >= 1, --port in 0..65535, --idle-timeout >= 0")
    env_kwargs = {}
    for item in args.env_args:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--env-arg wants KEY=VALUE, got {item!r}")
        try:
            env_kwargs[key] = json.loads(value)  # numbers, booleans, lists; anything else stays a string
        except json.JSONDecodeError:
            env_kwargs[key] = value
    serve(ServerConfig(resolve(args.env_id), host=args.host, port=args.port, max_sessions=args.max_sessions,
                       idle_timeout=args.idle_timeout or None, expert=not args.no_expert, env_kwargs=env_kwargs))
    # The process ends next. The interpreter's exit would run the cyclic collector over every object of the ~2,500
    # modules the server imported (OpenEnv brings gradio and pandas): ~0.5 s of CPU, tens of seconds at nice 19 on
    # a busy machine, after "stopped" was printed. Frozen objects are left out of it; atexit hooks still run.
    gc.freeze()
    return 0


def add_serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a task over HTTP (OpenEnv protocol + EPPO sessions); prints its URL")
    p.add_argument("env_id", help="task id or name, e.g. eppo/MathTool-v0 or math")
    p.add_argument("--host", default="127.0.0.1", help="default: loopback only")
    p.add_argument("--port", type=int, default=8000, help="0: any free port")
    p.add_argument("--max-sessions", type=int, default=32, help="concurrent sessions (one env each)")
    p.add_argument("--idle-timeout", type=float, default=600.0, help="seconds before an idle session's env is closed; 0: never")
    p.add_argument("--no-expert", action="store_true", help="do not reveal the oracle's move in a session's state")
    p.add_argument("--env-arg", dest="env_args", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword argument for the task's constructor, e.g. --env-arg high=3; repeatable")
    p.set_defaults(func=cmd_serve)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eppo-envs", description=__doc__)
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="import MODULE first (registers your own tasks); repeatable")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="registered tasks with their splits and instance counts")
    p.add_argument("--no-counts", action="store_true", help="skip building data to count instances")
    p.set_defaults(func=cmd_list)

    for name, func, text in (("show", cmd_show, "print one instance's prompt"), ("play", cmd_play, "play it yourself")):
        p = sub.add_parser(name, help=text)
        p.add_argument("env_id", help="task id or name, e.g. eppo/ALFWorld-v0 or alfworld")
        p.add_argument("--split", default=None)
        p.add_argument("--seed", type=SEED, default=0)
        p.set_defaults(func=func)

    p = sub.add_parser("expert", help="run the expert; print success, reward, steps and steps/s")
    p.add_argument("env_id")
    p.add_argument("--split", default=None, help="default: the env's evaluation split")
    p.add_argument("--episodes", type=COUNT, default=20)
    p.add_argument("--seed", type=SEED, default=0, help="first seed (episodes use seed, seed+1, ...)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a sentence")
    p.set_defaults(func=cmd_expert)

    p = sub.add_parser("bench", help="expert steps/s for every registered task")
    p.add_argument("--episodes", type=COUNT, default=10)
    p.add_argument("--split", default=None, help="default: each env's evaluation split")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)

    add_serve_parser(sub)
    return parser


def _interrupt(signum: int, frame) -> None:  # noqa: ANN001  (a frame)
    """SIGTERM as Ctrl-C (by default it kills the command silently, exit 143, its envs' `finally` blocks unrun), and
    either signal only once: a second one while the envs close (a browser, a sandbox) would cut their cleanup short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # `serve` installs its own handlers while it serves (a server's stop is exit 0) and puts these back after. A
    # signal ignored from the start (a `nohup` or a background job's SIGINT) stays ignored, as Unix intends.
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)
                if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        _load_plugins(args.imports)
        status = args.func(args)
        sys.stdout.flush()  # here, not at the interpreter's exit: a closed pipe is then caught below
        return status
    except BrokenPipeError:  # the reader went away (`eppo-envs list | head -1`): stop quietly
        return stdout_closed()
    except (KeyError, ValueError, ModuleNotFoundError, TaskError) as exc:
        # User errors (unknown id, bad split, missing plugin, a task's hook returning the wrong types) get one line
        # on stderr, not a traceback; plain print:
        # rich would wrap a long line at the terminal's width.
        print(f"eppo-envs: error: {_message(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the envs closed on the way out (run_expert's finally); one line
        print("eppo-envs: interrupted", file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
