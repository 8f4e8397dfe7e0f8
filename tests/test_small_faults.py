"""Small faults found while attacking the envs (issue #14), each pinned by a test."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from gymnasium.error import ResetNeeded

import eppo_envs
import eppo_envs.example.guess_number  # noqa: F401  (registers example/GuessNumber-v0)
from eppo_envs.core import conformance

ROOT = Path(__file__).resolve().parents[1]
needs_bwrap = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="bubblewrap is not installed")


@needs_bwrap
def test_readme_math_example_expert_wins_after_the_users_own_tool_call():
    env = eppo_envs.make("eppo/MathTool-v0")
    env.reset(seed=0)
    obs, *_ = env.step("<python>print(6 * 7)</python>")  # as the README: the user's call prints 42
    assert "42" in obs
    for _ in range(3):
        obs, reward, terminated, _, info = env.step(env.unwrapped.expert_action())
        if terminated:
            break
    assert terminated and info["won"] and reward == 1.0, obs


def test_webshop_play_shows_bracketed_actions():
    proc = subprocess.run([sys.executable, "-m", "eppo_envs.cli", "play", "eppo/WebShop-v0", "--seed", "0"],
                          input="expert\nquit\n", capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    listed = [line for line in proc.stdout.splitlines() if line.startswith("actions: ")]
    assert len(listed) == 2 and "search[" in listed[0], listed  # the search page, then the results page
    assert "click[back to search]" in listed[1] and "click[next >]" in listed[1], listed[1]


def test_bench_doc_alfworld_validation_count_matches_the_env():
    # the expert's validation sweep ("Other figures measured while building") moved from the README to docs/bench.md
    bench = (ROOT / "docs" / "bench.md").read_text()
    counts = {int(n) for n in re.findall(r"100% of (\d+) `valid_(?:un)?seen`", bench)}
    env = eppo_envs.make("eppo/ALFWorld-v0")
    assert counts == {env.unwrapped.num_instances("valid_seen")} == {env.unwrapped.num_instances("valid_unseen")}


@pytest.mark.parametrize("value", ["abc", None, [1], True])
def test_a_bad_index_option_names_the_option(value):
    env = eppo_envs.make("example/GuessNumber-v0")
    with pytest.raises(ValueError, match=r"reset option 'index' must be an integer"):
        env.reset(options={"index": value})
    assert env.reset(options={"index": "3"})[1]["instance_id"] == env.reset(options={"index": 3})[1]["instance_id"]


def test_step_after_the_episode_ended_asks_for_reset():
    env = eppo_envs.make("example/GuessNumber-v0")
    env.reset(seed=0)
    terminated = False
    while not terminated:
        _, _, terminated, _, _ = env.step(env.unwrapped.expert_action())
    with pytest.raises(ResetNeeded, match=r"call reset\(\)"):
        env.step("<answer>1</answer>")
    env.reset(seed=1)
    env.step("<answer>1</answer>")  # a new episode steps again


def test_make_help_lists_every_phony_target():
    makefile = (ROOT / "Makefile").read_text()
    phony = set(re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split())
    helped = set(re.findall(r"^([a-z-]+):.*## ", makefile, re.M))
    assert phony == helped, phony ^ helped


def test_check_all_says_so_on_success(capsys):
    assert conformance.check_all("example/GuessNumber-v0") == ("gymnasium", "determinism", "expert", "malformed")
    assert capsys.readouterr().out.strip() == \
        "example/GuessNumber-v0: conformance OK (gymnasium, determinism, expert, malformed)"


def test_resume_says_which_step_it_continues_from(tmp_path, capsys):
    import torch
    from safetensors.torch import save_file

    from eppo_train.config import load_config
    from eppo_train.trainer import Trainer

    cfg = load_config("tiny", [f"run.out_dir={tmp_path}", "run.iterations=5", "ray.enabled=false"])
    checkpoint = cfg.run_dir / "checkpoints" / "step_000002"
    (checkpoint / "model").mkdir(parents=True)
    (checkpoint / "trainer.json").write_text('{"step": 2, "metrics_offset": 0}')
    # whole files, as a resume checks them before it starts (their contents are not read here)
    save_file({"w": torch.zeros(1)}, str(checkpoint / "model" / "model.safetensors"))
    torch.save({}, checkpoint / "learner.pt")
    (cfg.run_dir / "latest").write_text("step_000002")
    assert Trainer(cfg, resume=True)._prepare_dir() == (2, 0)
    assert f"resuming {cfg.run_dir} from step_000002: continuing at step 3 of 5" in capsys.readouterr().out


def test_a_ray_address_where_nothing_answers_is_one_line_at_once(tmp_path, capsys):
    """Ray's client retried `--ray-address 127.0.0.1:1` for over 200 s, printing its own warnings."""
    import socket
    import time

    from eppo_train.cli import main

    with socket.socket() as s:  # a port nothing listens on once this socket is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    assert main(["--config", "tiny", "--set", f"run.out_dir={tmp_path}", "--set", "sft.steps=0",
                 "--ray-address", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"ray.address '127.0.0.1:{port}': nothing answers there" in err, err
    assert time.monotonic() - t0 < 30


def test_a_ray_address_where_no_ray_answers_is_one_line_at_once(tmp_path, capsys):
    """The dashboard's port (or any web server) for --ray-address: Ray's client retried it for minutes, a C++
    warning a second (3m26s until a timeout stopped it)."""
    import threading
    import time
    from http.server import HTTPServer, SimpleHTTPRequestHandler

    from eppo_train.cli import main

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # its request log would be stderr lines of its own
            pass

    server = HTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        t0 = time.monotonic()
        assert main(["--config", "tiny", "--set", f"run.out_dir={tmp_path}", "--set", "sft.steps=0",
                     "--ray-address", f"127.0.0.1:{port}"]) == 2
        assert time.monotonic() - t0 < 30
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "something answers there, but not a Ray cluster" in err, err


def test_the_ray_address_probe_lets_a_real_gcs_through():
    import ray

    from eppo_train.runtime.ray_cluster import _check_reachable

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        _check_reachable(ray.get_runtime_context().gcs_address)  # its first bytes are an HTTP/2 SETTINGS frame
    finally:
        if started:
            ray.shutdown()


def test_an_actor_lost_mid_run_is_one_line_with_the_resume_hint(tmp_path, monkeypatch, capsys):
    """A Ray actor that dies under `eppo-train` (killed, out of memory, its node gone) stops the run with one line
    that names it and how to resume, exit 1, not Ray's 30-line ActorDiedError traceback."""
    from eppo_train import trainer
    from eppo_train.cli import main
    from eppo_train.runtime.interrupt import WorkerLost

    def dies(cfg, resume=False):
        (cfg.run_dir / "checkpoints" / "step_000001").mkdir(parents=True)
        (cfg.run_dir / "checkpoints" / "step_000001" / "trainer.json").write_text('{"step": 1}')
        (cfg.run_dir / "latest").write_text("step_000001")
        raise WorkerLost("the learner actor died (its process ended: killed, out of memory, or its node went away)")

    monkeypatch.setattr(trainer, "train", dies)
    assert main(["--config", "tiny", "--set", f"run.out_dir={tmp_path}", "--set", "sft.steps=0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("eppo-train: error: the learner actor died (") and \
        f"; resume with: eppo-train --resume {tmp_path / 'tiny'}" in err


def test_a_ray_address_with_no_cluster_is_one_line(tmp_path, monkeypatch, capsys):
    # `eppo-train --ray-address auto` with no cluster running: one line, not a 29-line ConnectionError traceback.
    # ray.init is replaced: a real "auto" would join any local Ray another test or user has running on this machine.
    import ray

    from eppo_train.cli import main

    def no_cluster(*args, **kwargs):
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to by "
                              "setting `--address` flag or `RAY_ADDRESS` environment variable.")

    monkeypatch.setattr(ray, "init", no_cluster)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    assert main(["--config", "tiny", "--set", f"run.out_dir={tmp_path}", "--set", "sft.steps=0",
                 "--ray-address", "auto"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ray.address 'auto': Could not find any running Ray instance" in err
    assert "ray start --head" in err

    # with an SFT warm start to build, it is told before the warm start's minutes, not after them
    monkeypatch.setenv("EPPO_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["--config", "tiny", "--set", f"run.out_dir={tmp_path}", "--set", "sft.steps=3",
                 "--ray-address", "auto"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ray.address 'auto'" in err and not (tmp_path / "cache" / "models").exists()


@pytest.mark.parametrize("when", ["between calls", "during a call"])
def test_a_dead_engine_process_is_worker_lost(when):
    """The CPU vLLM engine runs in a child (policy/hosted.py). Killed between two calls (the next call's send:
    BrokenPipeError) or during one, it is `WorkerLost`: one line with the exit code (eppo-train adds the resume hint,
    exit 1)."""
    import multiprocessing
    import os

    from eppo_train.policy.base import SamplingParams
    from eppo_train.policy.hosted import HostedVLLMPolicy
    from eppo_train.runtime.interrupt import WorkerLost

    ours, theirs = multiprocessing.Pipe()
    context = multiprocessing.get_context("fork")
    if when == "between calls":
        child = context.Process(target=os._exit, args=(9,))
    else:  # it takes the call, then dies before answering
        child = context.Process(target=lambda: (theirs.recv(), os._exit(9)))
    child.start()
    theirs.close()
    if when == "between calls":
        child.join()
    engine = HostedVLLMPolicy.__new__(HostedVLLMPolicy)
    engine._process, engine._conn = child, ours
    with pytest.raises(WorkerLost, match=r"^the vLLM engine process died \(exit code 9\)$"):
        engine.generate([[1, 2]], SamplingParams(max_new_tokens=2))
