"""Progress events from inside `rollout.run_rollout`: after every turn it reports episodes done and tokens made.

Listeners are registered around a stage (`with listen(callback): ...`), so the pipeline, SFT demos and evaluation
show progress without the trainer or the SFT code knowing about displays. A listener must be cheap and must not
raise (it runs inside the agent loop).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class RolloutTick:
    done: int  # episodes of this rollout call finished so far
    total: int  # episodes in this rollout call
    tokens: int  # new tokens generated so far in this call (0 for text-only agents)
    generation_seconds: float  # time spent in the agent so far in this call
    turn: int  # turns played so far
    final: bool = False  # the call's last tick
    agent: str = ""  # who plays (`Agent.name`): "expert" for demonstrations and expert-guided groups


# The agent name of an evaluation inside another stage (the trainer's `run.eval_every`): displays show its ticks as
# evaluation episodes, not as the iteration's rollout
EVALUATION_AGENT = "evaluation"

Listener = Callable[[RolloutTick], None]
_LISTENERS: list[Listener] = []


@contextmanager
def listen(callback: Listener) -> Iterator[None]:
    _LISTENERS.append(callback)
    try:
        yield
    finally:
        _LISTENERS.remove(callback)


def notify(tick: RolloutTick) -> None:
    for callback in list(_LISTENERS):
        callback(tick)
