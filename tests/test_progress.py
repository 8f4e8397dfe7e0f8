"""Progress lines: one line per count, never the same "done/total" twice, a new rollout counted afresh."""

from __future__ import annotations

import io
import threading
import time

from eppo_train.report.progress import Progress
from eppo_train.report.ticks import EVALUATION_AGENT, RolloutTick


def _lines(stream: io.StringIO) -> list[str]:
    return [line.split("] ", 1)[1] for line in stream.getvalue().splitlines()]


def test_a_rollouts_last_and_closing_ticks_print_one_line_and_the_next_rollout_prints_again():
    out = io.StringIO()
    progress = Progress(["rl"], ["a"], stream=out, every_s=3600)
    progress.start("rl")
    on_tick = progress.ticks("rollout episodes")
    for _ in range(2):  # two iterations' rollouts of 4 episodes
        on_tick(RolloutTick(1, 4, 10, 0.5, 3))  # under every_s since the last line: not printed
        on_tick(RolloutTick(4, 4, 40, 1.0, 3))  # all done: printed
        on_tick(RolloutTick(4, 4, 40, 1.0, 3, final=True))  # the closing tick: the same count, not repeated
    progress.done(out)  # type: ignore[arg-type]  (only printed)
    counts = [line for line in _lines(out) if "rollout episodes" in line]
    assert len(counts) == 2 and all("rollout episodes 4/4" in line for line in counts)


def test_the_experts_rollout_of_an_iteration_is_named_as_such():
    out = io.StringIO()
    progress = Progress(["rl"], ["a"], stream=out, every_s=3600)
    progress.start("rl")
    on_tick = progress.ticks("rollout episodes")
    on_tick(RolloutTick(8, 8, 80, 1.0, 3, final=True, agent="vllm"))  # the policy's episodes
    on_tick(RolloutTick(2, 2, 0, 0.0, 3, final=True, agent="expert"))  # then its expert-guided groups
    on_tick(RolloutTick(4, 4, 40, 1.0, 2, final=True, agent=EVALUATION_AGENT))  # run.eval_every's evaluation
    progress.done(out)  # type: ignore[arg-type]  (only printed)
    counts = [line.split(": ", 1)[1].split(" | ")[0] for line in _lines(out) if "episodes" in line]
    assert counts == ["rollout episodes 8/8", "expert rollout episodes 2/2", "evaluation episodes 4/4"]


def test_the_evaluation_agent_is_named_for_these_lines_and_decodes_greedily():
    # the trainer's run.eval_every evaluation reaches the lines above by this name; the pipeline decodes greedily too
    from types import SimpleNamespace

    from eppo_train.config import load_config
    from eppo_train.eval.fixed_set import evaluation_agent, greedy_params

    cfg = load_config("tiny")
    agent = evaluation_agent(cfg, SimpleNamespace(tokenizer=None))
    assert agent.name == EVALUATION_AGENT and agent.params == greedy_params(cfg)
    assert agent.params.greedy and agent.params.max_new_tokens == cfg.rollout.max_new_tokens  # no evaluation cap
    capped = load_config("tiny", ["evaluation.max_new_tokens=7"])
    assert evaluation_agent(capped, SimpleNamespace(tokenizer=None)).params.max_new_tokens == 7


def test_the_rl_eta_leaves_out_the_trainers_start_up(tmp_path, monkeypatch):
    # the first iteration's own time, then the time between iterations: not the trainer's start-up (Ray, the engine,
    # the model), which would put a tiny run's first line at "stage ETA 44s" for 2 iterations of 1 s each
    import json

    from eppo_train.report import progress as progress_module
    from eppo_train.report.progress import RLWatcher

    clock = [100.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: clock[0])
    out = io.StringIO()
    progress = Progress(["rl"], ["a"], stream=out, every_s=3600)
    progress.start("rl", announce=False)
    watcher = RLWatcher(tmp_path, total=5, progress=progress, poll_s=0.01)
    metrics = tmp_path / "metrics.jsonl"
    with watcher:
        clock[0] += 40.0  # start-up
        for step in (1, 2):
            with metrics.open("a") as f:
                f.write(json.dumps({"step": step, "iteration_time_s": 2.0, "tasks": {"a": {"success": 0.5}}}) + "\n")
            while f"iteration {step}/5" not in out.getvalue():
                threading.Event().wait(0.01)
            clock[0] += 3.0  # the next iteration with its checkpoint
    progress.stop()
    etas = [line.rsplit("stage ETA ", 1)[1] for line in _lines(out) if "iteration" in line]
    assert etas == ["8s", "7s"]  # 4 x 2 s; then (2 s + 3 s) / 2 a step x 3


def test_the_sft_eta_leaves_out_the_demos(monkeypatch):
    from eppo_train.report import progress as progress_module

    clock = [0.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: clock[0])
    out = io.StringIO()
    progress = Progress(["sft"], ["a"], stream=out, every_s=3600)
    progress.start("sft", announce=False)
    clock[0] = 120.0  # two minutes of demo episodes and the model's load
    for step in range(4):
        progress.sft_step(step, 4, 1.0)
        clock[0] += 5.0
    progress.stop()
    assert [line.split(": ", 1)[1] for line in _lines(out)] == [
        "step 1/4 loss 1.000", "step 2/4 loss 1.000 | stage ETA 10s", "step 3/4 loss 1.000 | stage ETA 5s",
        "step 4/4 loss 1.000 | stage ETA 0s"]


def test_an_evaluations_eta_waits_for_a_fifth_of_its_episodes():
    """Its first episodes are the ones that end at turn 1: the rate over them put the ETA of a 2m40s stage at
    161 minutes. No ETA before a fifth of the episodes is done; from there, the rate so far."""
    out = io.StringIO()
    progress = Progress(["eval_rl"], ["a"], stream=out, every_s=0)
    progress.start("eval_rl")
    for done, seconds in ((1, 30.0), (63, 40.0), (64, 60.0), (160, 120.0), (320, 160.0)):
        progress.episodes("episodes", done, 320, 100 * done, seconds, stage_eta=True)
    progress.stop()
    lines = [line for line in _lines(out) if "episodes " in line]
    assert [line.split(" | stage ETA ")[-1] if "ETA" in line else "" for line in lines] == [
        "", "", "4m00s", "2m00s", ""]  # 60 s / 64 x 256 left; 120 s / 160 x 160


def test_no_heartbeat_spins_when_every_event_prints():
    """`every_s=0` (print every event) started a heartbeat that waited 0 s between checks: it wrote a "working"
    line per loop for as long as the process lived (a test left one running and the suite grew to 24 GB)."""
    out = io.StringIO()
    progress = Progress(["eval"], ["a"], stream=out, every_s=0)
    progress.start("eval")
    time.sleep(0.3)
    assert "working" not in out.getvalue()  # a spinning heartbeat writes thousands of these in 0.3 s
    progress.stop()
