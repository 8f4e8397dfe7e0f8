"""The pipeline's progress display: one line per event on stderr (stage, step or iteration, per-task success, ETA).

Plain lines rather than a live panel, so the display reads the same in a terminal, under `nohup` and in CI logs.
RL progress is read from the trainer's own `metrics.jsonl` by a watcher thread: the trainer stays unaware of it.
Inside a stage, `episodes(...)` turns the agent loop's per-turn ticks (eppo_train.report.ticks) into a line at most every
`every_s` seconds (episodes done/total, new tokens/s, ETA), so no stage is minutes of silence. Every event also
records where the run is for the one-line interrupt message (eppo_train.runtime.interrupt).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from eppo_train.report.ticks import EVALUATION_AGENT, Listener, RolloutTick
from eppo_train.runtime import interrupt


def _fmt_s(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    def __init__(self, stages: Sequence[str], tasks: Sequence[str], stream: TextIO | None = None,
                 every_s: float = 15.0) -> None:
        self.stages, self.tasks = list(stages), list(tasks)
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()
        self.stage_t0 = self.t0
        self.stage = ""
        self._steps_t0: float | None = None  # when the stage's first SFT step ended
        self.every_s = every_s
        self._last_line = 0.0
        self._last_count: tuple[str, int, int] | None = None  # the last episode count printed
        self._where = ""
        self._stopped = threading.Event()
        # A heartbeat: one engine call can take minutes (every live episode's turn in one batch), and ticks only
        # come between turns; if nothing was printed for `4 x every_s`, say the stage is still at work. With
        # `every_s <= 0` every event prints anyway, and a heartbeat would spin, writing a line per loop.
        if every_s > 0:
            threading.Thread(target=self._heartbeat, daemon=True).start()

    def _line(self, text: str) -> None:
        self._last_line = time.perf_counter()
        print(f"[{_fmt_s(time.perf_counter() - self.t0):>7}] {text}", file=self.stream, flush=True)

    def _heartbeat(self) -> None:
        while not self._stopped.wait(self.every_s / 3):
            quiet = time.perf_counter() - self._last_line
            if self.stage and quiet >= 4 * self.every_s:
                at = f"at {self._where}, " if self._where else ""
                self._line(f"{self._pos(self.stage)}: working ({at}{_fmt_s(time.perf_counter() - self.stage_t0)} "
                           "into the stage)")

    def _pos(self, stage: str) -> str:
        return f"stage {self.stages.index(stage) + 1}/{len(self.stages)} {stage}"

    def start(self, stage: str, announce: bool = True) -> None:
        """Enter `stage`; without `announce` no line says so (its first step, or the heartbeat, will): a set-up
        error right at the start then stays the command's one line."""
        self.stage, self.stage_t0 = stage, time.perf_counter()
        self._steps_t0 = None
        self._where, self._last_count = "", None
        interrupt.set_where(0, self._pos(stage))
        if announce:
            self._line(f"{self._pos(stage)}: started")
        else:
            self._last_line = self.stage_t0  # the heartbeat counts its quiet from here

    def episodes(self, what: str, done: int, total: int, tokens: int, seconds: float, stage_eta: bool,
                 level: int = 1) -> None:
        """Episodes done of `total` in this stage (or this rollout); a line when `every_s` passed or at the end."""
        interrupt.set_where(level, f"{what} {done}/{total}")
        self._where = f"{what} {done}/{total}"
        now = time.perf_counter()
        if done < total and now - self._last_line < self.every_s:
            return
        if done == total and self._last_count == (what, done, total):
            return  # a rollout's last tick and its closing tick carry the same count: one line
        self._last_line, self._last_count = now, (what, done, total)
        # A rate over under 0.1 s (the first tick of a rollout, an expert's instant replies) means nothing.
        rate_text = f" | {tokens / seconds:.0f} new tok/s" if seconds >= 0.1 else ""
        eta = ""
        # Episodes are played in lockstep chunks and the one-turn ones finish first, so the rate over the first
        # few says nothing of the rest ("stage ETA 161m" after 1 of 320 episodes of a stage that takes 2m40s): the
        # ETA waits for a fifth of the stage, by when at least one chunk of 64 has been played out.
        if stage_eta and total / 5 <= done < total:
            eta = f" | stage ETA {_fmt_s(seconds / done * (total - done))}"
        self._line(f"{self._pos(self.stage)}: {what} {done}/{total}{rate_text}{eta}")

    def ticks(self, what: str, level: int = 1) -> Listener:
        """A listener for eppo_train.report.ticks: one rollout call's episodes (SFT demos, an RL iteration's rollout)."""
        started: list[float] = []

        def on_tick(t: RolloutTick) -> None:
            if not started:
                started.append(time.perf_counter())
                self._last_count = None  # a new rollout: its count starts over
            # the expert's episodes (SFT demos, an RL iteration's expert-guided groups) are named as such, and so
            # are those of an evaluation inside the stage (the trainer's run.eval_every)
            label = {"expert": f"expert {what}", EVALUATION_AGENT: "evaluation episodes"}.get(t.agent, what)
            self.episodes(label, t.done, t.total, t.tokens, time.perf_counter() - started[0], stage_eta=False,
                          level=level)
            if t.final:
                started.clear()

        return on_tick

    def note(self, text: str) -> None:
        """A line of its own: a decision the run made that its reader should see."""
        self._line(text)

    def skip(self, stage: str) -> None:
        self._line(f"{self._pos(stage)}: already done (resumed run)")

    def finish(self, stage: str, tasks: dict[str, Any] | None) -> None:
        took = _fmt_s(time.perf_counter() - self.stage_t0)
        extra = ""
        if tasks:
            extra = " | success " + " ".join(f"{t} {v['success']:.2f}" for t, v in tasks.items())
        self._line(f"{self._pos(stage)}: done in {took}{extra}")

    def sft_step(self, step: int, steps: int, loss: float) -> None:
        done = step + 1
        interrupt.set_where(1, f"step {done}/{steps}")
        self._where = f"step {done}/{steps}"
        # Timed from the end of the first step: the stage's demo episodes and model load before it are no step's
        # time (counted in, they would put step 1's ETA at several times the stage's rest). Step 1 has no ETA yet.
        now = time.perf_counter()
        if done == 1 or self._steps_t0 is None:
            self._steps_t0, eta = now, ""
        else:
            eta = f" | stage ETA {_fmt_s((now - self._steps_t0) / (done - 1) * (steps - done))}"
        if done == 1 or done == steps or done % max(steps // 10, 1) == 0:
            self._line(f"{self._pos(self.stage or 'sft')}: step {done}/{steps} loss {loss:.3f}{eta}")

    def rl_iteration(self, record: dict[str, Any], total: int, started: float, first_step: int,
                     first_s: float) -> None:
        """Iteration `step` done; `started` is when the watcher saw this run's first iteration (`first_step`), which
        took `first_s`: the ETA counts iterations only, with their checkpoints and evaluations, not the trainer's
        start-up (Ray, engine, model: counted in, the first ETA of a 3-iteration tiny run would be 44 s for 2 s)."""
        step = int(record["step"])
        if step < total:
            interrupt.set_where(1, f"iteration {step + 1}/{total}")
            self._where = f"iteration {step + 1}/{total}"
        per = (time.perf_counter() - started + first_s) / (step - first_step + 1)
        tasks = record.get("tasks", {})
        succ = " ".join(f"{t} {v.get('success', 0.0):.2f}" for t, v in tasks.items())
        self._line(f"{self._pos(self.stage or 'rl')}: iteration {step}/{total} | train success {succ} | "
                   f"{record.get('iteration_time_s', 0.0):.0f}s/it | stage ETA {_fmt_s(per * (total - step))}")

    def stop(self) -> None:
        """Stop the heartbeat thread (a command that writes no summary file ends with this)."""
        self._stopped.set()

    def done(self, summary: Path) -> None:
        self.stop()
        self._line(f"finished: {summary}")


class RLWatcher:
    """While the trainer runs, report each new line of its metrics file."""

    def __init__(self, run_dir: Path, total: int, progress: Progress, poll_s: float = 2.0,
                 fresh: bool = False) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.total, self.progress, self.poll_s = total, progress, poll_s
        # `fresh`: the trainer starts over (run.overwrite), so a metrics file from before is not this run's until
        # the trainer has rewritten it
        self.fresh, self._since_ns = fresh, time.time_ns()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _records(self) -> list[dict]:
        if not self.path.exists():
            return []
        if self.fresh and self.path.stat().st_mtime_ns < self._since_ns:
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line being written
                break
        return out

    def _watch(self) -> None:
        # Steps already in the file before the trainer starts belong to an earlier run (a resume): read them now,
        # not after the first poll, or a fast iteration finished within the poll would be taken for an old one.
        # Steps, not line counts, say what is new: a resumed trainer first cuts the file back to its checkpoint.
        records = self._records()
        first = reported = int(records[-1]["step"]) if records else 0
        interrupt.set_where(1, f"iteration {first + 1}/{self.total}")
        origin: tuple[float, int, float] | None = None  # this run's first iteration: seen at, its step, its time
        while True:
            stop = self._stop.wait(self.poll_s)
            for rec in self._records():
                if int(rec["step"]) > reported:
                    if origin is None:
                        origin = (time.perf_counter(), int(rec["step"]), float(rec.get("iteration_time_s", 0.0)))
                    self.progress.rl_iteration(rec, self.total, *origin)
                    reported = int(rec["step"])
            if stop:
                return

    def __enter__(self) -> RLWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
