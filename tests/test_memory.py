"""The memory account (report/memory.py): components by process, peaks between samples, windows, the summary."""

import ctypes
import multiprocessing
import subprocess
import sys

import pytest

from eppo_train.report import memory
from eppo_train.report.memory import GB, MemoryAccount, flatness, slope, summary_lines

MB = 2**20


def _hold(mb: int, ready, done) -> None:  # noqa: ANN001  (multiprocessing Events)
    """A child that touches `mb` MB, says so, and keeps them until told to go."""
    block = bytearray(mb * MB)
    block[:: 4096] = b"\1" * len(block[:: 4096])
    ready.set()
    done.wait(60)


@pytest.fixture
def engine_child():
    """A spawned child holding 64 MB, labelled as the engine the way policy/hosted.py labels its child."""
    ctx = multiprocessing.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold, args=(64, ready, done), daemon=True)
    child.start()
    memory.name_process(child.pid, memory.ENGINE)
    assert ready.wait(60)
    yield child
    done.set()
    child.join(10)


def test_components_are_the_driver_the_engine_and_the_rest(engine_child):
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        s = MemoryAccount().sample()
        assert {"driver", "engine", "other"} <= set(s.rss)
        assert s.rss["engine"] >= 64 * MB  # the child's block, and its own interpreter
        assert s.processes["driver"] == 1
        assert s.total == sum(s.rss.values()) and s.total_peak >= s.total
    finally:
        helper.kill()
        helper.wait()


def test_a_peak_between_two_samples_is_seen():
    account = MemoryAccount()
    account.sample()
    block = bytearray(200 * MB)
    block[:: 4096] = b"\1" * len(block[:: 4096])
    del block
    memory.release()
    s = account.sample()
    assert s.peak["driver"] - s.rss["driver"] > 150 * MB  # freed before the sample, still its peak
    assert account.sample().peak["driver"] - s.rss["driver"] < 50 * MB  # and that peak was reset by the sample


def test_windows_keep_the_peaks_of_the_samples_inside_them():
    account = MemoryAccount()
    account.open("stage")
    block = bytearray(100 * MB)
    block[:: 4096] = b"\1" * len(block[:: 4096])
    account.sample()  # an iteration's sample, inside the stage
    del block
    memory.release()
    peaks = account.close("stage")
    assert peaks["total"] >= peaks["driver"] > 100 * MB
    assert "stage" not in account.windows


def test_ray_actors_are_components_by_class(monkeypatch):
    """`ray::LearnerWorker.train_step` -> LearnerWorker; two env workers -> EnvWorker_0, EnvWorker_1."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(4)]
    titles = {procs[0].pid: "ray::LearnerWorker.train_step", procs[1].pid: "ray::EnvWorker",
              procs[2].pid: "ray::EnvWorker.step", procs[3].pid: "/usr/bin/raylet --node"}
    real = memory._cmdline
    monkeypatch.setattr(memory, "_cmdline", lambda p: titles.get(p.pid) or real(p))
    try:
        s = MemoryAccount().sample()
        assert {"LearnerWorker", "EnvWorker_0", "EnvWorker_1", "ray"} <= set(s.rss)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_iteration_metrics_are_flat_scalars_in_gb():
    m = memory.iteration_metrics(MemoryAccount())
    assert 0 < m["mem_driver_gb"] <= m["mem_total_gb"] <= m["mem_total_peak_gb"]
    assert m["mem_driver_peak_gb"] >= m["mem_driver_gb"]
    assert all(isinstance(v, float) for v in m.values())


def test_slope_and_flatness_against_hand_computed_values():
    assert slope([1.0, 2.0, 3.0, 4.0]) == pytest.approx(1.0)
    assert slope([5.0]) == 0.0
    # iterations 1-3 are the warm-up; 4..7 hold 2.0, 2.1, 1.9, 2.0 GB: mean 2.0, largest deviation 0.1 (5 %),
    # slope -0.02 GB an iteration (x = 0..3 centred at 1.5: (-1.5*0 + -0.5*0.1 + 0.5*-0.1 + 1.5*0) / 5)
    records = [{"step": s, "mem_total_gb": v} for s, v in enumerate([9.0, 9.0, 9.0, 2.0, 2.1, 1.9, 2.0], start=1)]
    f = flatness(records)
    assert f["iterations"] == 4 and f["mean_gb"] == pytest.approx(2.0)
    assert f["max_deviation_pct"] == pytest.approx(5.0)
    assert f["slope_mb_per_iteration"] == pytest.approx(-0.02 * GB / 1e6)
    assert flatness(records[:4]) is None


def test_summary_section_names_each_stage_and_the_rl_slope():
    stages = {"eval_base": {"driver": 1.2, "engine": 5.0, "total": 6.2}, "sft": {"driver": 2.5, "total": 2.5},
              "rl": {"driver": 3.0, "engine": 5.5, "total": 8.5}}
    records = [{"step": s, "mem_total_gb": 8.0 + 0.01 * s} for s in range(1, 11)]
    text = "\n".join(summary_lines(stages, records))
    assert "| stage | driver | engine | total |" in text
    assert "| sft | 2.50 | — | **2.50** |" in text
    assert "| rl | 3.00 | 5.50 | **8.50** |" in text
    assert "iterations 4-10" in text and "+10.0 MB per iteration" in text
    assert summary_lines({}, []) == []


def test_memory_scalars_go_under_their_own_tensorboard_tag():
    from eppo_train.report.metrics import _tag

    assert _tag("mem_driver_peak_gb") == "memory/driver_peak_gb"
    assert _tag("cuda_learner_allocated_peak_gb") == "memory/cuda_learner_allocated_peak_gb"
    assert _tag("loss") == "train/loss"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_returns_freed_heap_pages():
    """Blocks under glibc's mmap threshold freed between small ones still in use (the heap cannot shrink from its
    top), as a learner step's tensors leave it: free() keeps their pages, the trim hands them back."""
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    account = MemoryAccount()
    libc.malloc_trim(0)  # pages earlier tests freed would otherwise take the blocks without growing the RSS
    before = account.sample().rss["driver"]
    blocks, pins = [], []
    for _ in range(3000):  # ~190 MB of heap
        block = libc.malloc(64 * 1024)
        ctypes.memset(block, 1, 64 * 1024)
        blocks.append(block)
        pins.append(libc.malloc(200))
    for block in blocks:
        libc.free(block)
    try:
        # freed, but still resident (in a long test session part of the blocks reuses pages that were resident)
        kept = account.sample().rss["driver"] - before
        assert kept > 64 * MB
        memory.release()
        assert account.sample().rss["driver"] - before < 0.4 * kept
    finally:
        for pin in pins:
            libc.free(pin)


def test_labels_of_processes_gone_are_forgotten():
    """The labels and fallback peaks are kept per pid: a pid no longer under the driver is dropped at the next
    sample (a long run starts thousands of sandboxes; a pid can be reused by another process)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    memory.name_process(gone.pid, memory.ENGINE)
    account = MemoryAccount()
    account._seen_peak[gone.pid] = 1
    account.sample()
    assert gone.pid not in memory._named and gone.pid not in account._seen_peak
