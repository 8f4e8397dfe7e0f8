"""Progress lines: one line per count, never the same "done/total" twice, a new rollout counted afresh."""

from __future__ import annotations

import io

from eppo_train.progress import Progress
from eppo_train.ticks import EVALUATION_AGENT, RolloutTick


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
    from eppo_train.fixed_eval import evaluation_agent, greedy_params

    cfg = load_config("tiny")
    agent = evaluation_agent(cfg, SimpleNamespace(tokenizer=None))
    assert agent.name == EVALUATION_AGENT and agent.params == greedy_params(cfg)
    assert agent.params.greedy and agent.params.max_new_tokens == cfg.rollout.max_new_tokens  # no evaluation cap
    capped = load_config("tiny", ["evaluation.max_new_tokens=7"])
    assert evaluation_agent(capped, SimpleNamespace(tokenizer=None)).params.max_new_tokens == 7
