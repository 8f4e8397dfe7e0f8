"""A run's memory account: the RSS of every process a command owns, by component, now and at its peak.

The components are the processes under this one (the driver), each given a label:

    driver              this process (the trainer, the learner in local mode, the envs of a local pool)
    engine              the generation engine's process: our hosted vLLM child (labelled by `name_process` when it
                        starts) or vLLM's own `EngineCore` process, with the processes under it
    <Actor>[_i]         a Ray actor by its class (`ray::LearnerWorker` -> LearnerWorker; several of a class get _0, _1,
                        ... in pid order), an FSDP rank being one such actor; a process under an actor is the actor's,
                        except an engine under the generator actor, which is `engine`
    ray                 Ray's own processes (GCS, raylet, dashboard, idle workers) when this command started Ray
    other               anything else: sandboxes, browsers, reapers, multiprocessing helpers

Each `sample()` reads, per process, the RSS now and the peak since the last sample (Linux's `VmHWM`, which is then
reset through `/proc/<pid>/clear_refs`), so a peak between two samples is seen without a sampling thread: one pass
over `/proc` per iteration. A component's peak is the sum of its processes' peaks, and `total` the sum over every
component: an upper bound on the true simultaneous peak (processes may peak at different moments), and RSS counts a
page shared by two processes twice. Elsewhere than Linux the peak is the largest RSS a sample saw.

Windows (`open(name)` ... `close(name)`) collect the peaks of every sample taken inside them: the pipeline keeps one
per stage, the trainer reads one per iteration (`iteration_metrics`). On a multi-node Ray cluster only this node's
processes under the driver are seen (actors elsewhere are not), and with `ray.address` naming a running cluster
its actors are not under the driver either.

`release()` hands freed memory back to the system (a full garbage collection, then glibc's `malloc_trim`): a CPU
learner's step allocates and frees hundreds of MB of activations, logits and cached states in blocks under glibc's
mmap threshold, and without a trim the heap keeps those pages (docs/bench.md, "Memory").
"""

from __future__ import annotations

import ctypes
import gc
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import psutil

GB = 1e9  # figures are in GB (10^9 bytes), as the targets are stated

DRIVER, ENGINE, RAY, OTHER = "driver", "engine", "ray", "other"
_named: dict[int, str] = {}  # pid -> label, for processes whose command line does not say what they are
_RAY_SYSTEM = ("gcs_server", "raylet", "dashboard", "log_monitor", "runtime_env", "ray_client_server", "monitor.py",
               "ray::IDLE", "default_worker.py")


def name_process(pid: int, label: str) -> None:
    """Label process `pid` (its subtree too) in every later sample: the hosted engine's child says it is `engine`."""
    _named[pid] = label


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline()) or p.name()
    except (psutil.Error, OSError):
        return ""


def _label(p: psutil.Process, parent: str | None) -> str:
    """The component process `p` belongs to, given its parent's (a helper of the driver's is `other`)."""
    if p.pid in _named:
        return _named[p.pid]
    cmd = _cmdline(p)
    if "EngineCore" in cmd:
        return ENGINE
    if cmd.startswith("ray::") and not cmd.startswith("ray::IDLE"):
        return cmd[5:].split()[0].split(".")[0]  # ray::LearnerWorker.train_step -> LearnerWorker
    if any(s in cmd for s in _RAY_SYSTEM):
        return RAY
    return parent if parent not in (None, DRIVER) else OTHER


def _status_kb(pid: int, key: str) -> int | None:
    try:
        m = re.search(rf"^{key}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(m.group(1)) if m else None


def _reset_peak(pid: int) -> bool:
    """Start process `pid`'s VmHWM again from its RSS now (Linux >= 4.0, our own processes)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


@dataclass
class Sample:
    """One look at every process: bytes of RSS now and at the peak since the previous sample, by component."""

    rss: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    processes: dict[str, int] = field(default_factory=dict)  # how many processes each component has

    @property
    def total(self) -> int:
        return sum(self.rss.values())

    @property
    def total_peak(self) -> int:
        return sum(self.peak.values())


class MemoryAccount:
    """Samples of the process tree under `pid` (this process by default) and the peaks of named windows."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid or os.getpid()
        self.windows: dict[str, dict[str, int]] = {}
        self._seen_peak: dict[int, int] = {}  # pid -> largest RSS sampled, where VmHWM cannot be reset

    def components(self) -> list[tuple[psutil.Process, str]]:
        """(process, component) for the driver and every process under it.

        A process starts a component when its label says what it is (an engine, an actor, Ray's own); any other
        belongs to its parent's. Several actors of one class (env workers, learner ranks) are one component each,
        numbered in pid order."""
        try:
            root = psutil.Process(self.pid)
            children = root.children(recursive=True)  # breadth first: a parent comes before its children
        except psutil.Error:
            return []
        owner: dict[int, int] = {self.pid: self.pid}  # pid -> the pid that starts its component
        kind: dict[int, str] = {self.pid: DRIVER}  # component start -> its label
        listed = [root]
        for p in children:
            try:
                ppid = p.ppid()
            except psutil.Error:
                continue
            above = owner.get(ppid)
            label = _label(p, kind[above] if above is not None else None)
            if above is not None and label == kind[above]:
                owner[p.pid] = above
            else:
                owner[p.pid], kind[p.pid] = p.pid, label
            listed.append(p)
        alive = {p.pid for p in listed}  # what gone processes left behind goes (a pid may be reused)
        for table in (_named, self._seen_peak):
            for pid in [pid for pid in table if pid not in alive]:
                del table[pid]
        names: dict[int, str] = {}
        by_label: dict[str, list[int]] = defaultdict(list)
        for start, label in sorted(kind.items()):
            by_label[label].append(start)
        for label, starts in by_label.items():
            numbered = len(starts) > 1 and label not in (DRIVER, ENGINE, RAY, OTHER)
            for i, start in enumerate(starts):
                names[start] = f"{label}_{i}" if numbered else label
        return [(p, names[owner[p.pid]]) for p in listed]

    def sample(self) -> Sample:
        """RSS now and the peak since the last sample, by component (resets each process's VmHWM)."""
        rss_by: dict[str, int] = defaultdict(int)
        peak_by: dict[str, int] = defaultdict(int)
        count: dict[str, int] = defaultdict(int)
        for p, name in self.components():
            try:
                rss = p.memory_info().rss
            except psutil.Error:
                continue
            hwm = _status_kb(p.pid, "VmHWM")
            if hwm is not None and _reset_peak(p.pid):
                peak = max(hwm * 1024, rss)
            else:  # no resettable high-water mark: the largest RSS sampled
                peak = max(self._seen_peak.get(p.pid, 0), rss)
                self._seen_peak[p.pid] = peak
            rss_by[name] += rss
            peak_by[name] += peak
            count[name] += 1
        s = Sample(dict(rss_by), dict(peak_by), dict(count))
        for window in self.windows.values():
            for key, peak in s.peak.items():
                window[key] = max(window.get(key, 0), peak)
            window["total"] = max(window.get("total", 0), s.total_peak)
        return s

    def open(self, name: str) -> None:
        """Start a window: the peaks of every sample from now until `close(name)`. The sample taken here ends the
        previous interval, so the window starts from the RSS of now."""
        self.sample()
        self.windows[name] = {}

    def close(self, name: str) -> dict[str, int]:
        """Peak bytes by component (and `total`) over the window's samples, one taken now included."""
        self.sample()
        return self.windows.pop(name, {})


ACCOUNT = MemoryAccount()  # this process's account: the trainer's per-iteration samples feed the pipeline's windows


def iteration_metrics(account: MemoryAccount | None = None) -> dict[str, float]:
    """An iteration's memory scalars (GB): `mem_<component>_gb` (RSS now) and `mem_<component>_peak_gb` (peak since
    the previous sample, i.e. over the iteration), `mem_total_gb`, `mem_total_peak_gb`, and on CUDA this process's
    peaks outside the learner's step (`cuda_driver_*`; the step's own come with the learner's report)."""
    s = (account or ACCOUNT).sample()
    out: dict[str, float] = {"mem_total_gb": s.total / GB, "mem_total_peak_gb": s.total_peak / GB}
    for key in sorted(s.rss):
        out[f"mem_{key}_gb"] = s.rss[key] / GB
        out[f"mem_{key}_peak_gb"] = s.peak[key] / GB
    out.update(cuda_peaks())
    return out


def cuda_peaks(who: str = "driver", reset: bool = True) -> dict[str, float]:
    """torch.cuda's peak allocated and reserved bytes (GB) in this process since the last reset, as
    `cuda_<who>_allocated_peak_gb` / `cuda_<who>_reserved_peak_gb`; {} without CUDA here (or when torch is not
    loaded: nothing of ours is on the GPU then). The learner reports its step's own (`who="learner"`)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    out = {f"cuda_{who}_allocated_peak_gb": torch.cuda.max_memory_allocated() / GB,
           f"cuda_{who}_reserved_peak_gb": torch.cuda.max_memory_reserved() / GB}
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return out


def release() -> None:
    """Collect garbage and return the heap's free pages to the system (glibc's malloc_trim; nothing elsewhere)."""
    gc.collect()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # musl and others: no malloc_trim
            pass


def slope(values: list[float]) -> float:
    """The least-squares slope of `values` against their index (units per step); 0 for fewer than two."""
    n = len(values)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(values) / n
    return sum((i - mx) * (v - my) for i, v in enumerate(values)) / sum((i - mx) ** 2 for i in range(n))


def flatness(records: list[dict], key: str = "mem_total_gb", after: int = 3) -> dict[str, float] | None:
    """How flat `key` stays over a run's iterations after the first `after` (metrics.jsonl records): its mean, the
    largest deviation from the mean in % of it, and the least-squares slope in MB per iteration; None when fewer
    than two iterations have it."""
    values = [float(r[key]) for r in records if int(r.get("step", 0)) > after and r.get(key) is not None]
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return {"iterations": float(len(values)), "mean_gb": mean, "peak_gb": max(values),
            "max_deviation_pct": 100 * max(abs(v - mean) for v in values) / mean,
            "slope_mb_per_iteration": slope(values) * GB / 1e6}


def in_gb(peaks: dict[str, int]) -> dict[str, float]:
    """A window's peaks (bytes) as GB, rounded to MB, for a JSON state file."""
    return {k: round(v / GB, 3) for k, v in peaks.items()}


FLAT_AFTER = 3  # iterations before the RL stage's memory is expected to stay flat (the engine's caches fill)


def summary_lines(stages: dict[str, dict[str, float]], records: list[dict]) -> list[str]:
    """summary.md's memory section: each stage's peak RSS (GB) per component, and how flat the RL stage stayed.

    `stages`: stage -> its window's peaks in GB (`in_gb`); `records`: the RL stage's metrics.jsonl."""
    stages = {s: p for s, p in stages.items() if p}
    if not stages and not records:
        return []
    out = ["## Memory", "",
           "Peak resident memory (RSS, GB) of each process of the run during each stage (report/memory.py): the "
           "driver (trainer, learner, envs), the engine's process and any Ray actor. `total` is the sum of the "
           "components' peaks, an upper bound on the moment all processes together held the most.", ""]
    if stages:
        comps = sorted({c for p in stages.values() for c in p if c != "total"}, key=lambda c: (c != DRIVER, c))
        out += ["| stage | " + " | ".join(comps) + " | total |", "|---|" + "---:|" * (len(comps) + 1)]
        for stage, peaks in stages.items():
            out.append(f"| {stage} | " + " | ".join(f"{peaks[c]:.2f}" if c in peaks else "—" for c in comps)
                       + f" | **{peaks.get('total', 0.0):.2f}** |")
        out.append("")
    flat = flatness(records, after=FLAT_AFTER)
    if flat is not None:
        out.append(f"RL stage, iterations {FLAT_AFTER + 1}-{FLAT_AFTER + int(flat['iterations'])}: total RSS at an "
                   f"iteration's end {flat['mean_gb']:.2f} GB on average, at most {flat['max_deviation_pct']:.1f} % "
                   f"from it; slope {flat['slope_mb_per_iteration']:+.1f} MB per iteration "
                   "(`mem_*` in `rl/metrics.jsonl`, `memory/` in TensorBoard).")
        out.append("")
    return out
