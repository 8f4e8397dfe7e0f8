"""`make bench` plumbing: cheap sections in --quick mode write their figures; a failing section is reported, not fatal.

Timings are never asserted (the machine is shared); only that figures exist, are positive and say how they were made.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from eppo_train.benchmarks import run as bench
from eppo_train.benchmarks.common import SECTIONS, Unavailable, section


def _run(tmp_path, *args: str) -> dict:
    out = tmp_path / "results.json"
    assert bench.main(["--quick", "--out", str(out), *args]) == 0
    return json.loads(out.read_text())


def test_quick_envs_and_sandbox_write_figures(tmp_path):
    data = _run(tmp_path, "--only", "envs,sandbox", "--envs", "GuessNumber")
    assert data["quick"] is True
    assert data["machine"]["cores"] >= 1 and "cpu" in data["machine"]
    figures = {(f["section"], f["name"]): f for f in data["figures"]}
    guess = figures[("envs", "example/GuessNumber-v0 expert")]
    assert guess["error"] is None and guess["value"] > 0 and guess["unit"] == "steps/s"
    # the command reruns as written: a plain `eppo-envs expert example/GuessNumber-v0 ...` refuses ("no task"), the
    # example being registered only by importing its module
    assert guess["how"].startswith("eppo-envs --import eppo_envs.example.guess_number expert example/GuessNumber-v0")
    rerun = subprocess.run([sys.executable, "-m", "eppo_envs.cli", *shlex.split(guess["how"])[1:]],
                           capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0 and "success 100.0%" in rerun.stdout, rerun.stderr[-2000:]
    assert guess["extra"]["success"] == 1.0  # the expert wins
    sandbox = [f for f in data["figures"] if f["section"] == "sandbox"]
    assert {f["name"] for f in sandbox} >= {"trivial snippet, 1 worker(s)", "100ms snippet, 2 worker(s)"}
    for f in sandbox:  # the sandbox may be unavailable on some machines; then it must say why
        assert (f["value"] is not None and f["value"] > 0) or f["error"]
    assert set(data["section_seconds"]) == {"envs", "sandbox"}


def test_learner_section_with_tiny_model(tmp_path, capsys):
    data = _run(tmp_path, "--only", "learner", "--model", "tiny")
    rows = [f for f in data["figures"] if f["section"] == "learner"]
    assert [f["unit"] for f in rows] == ["tokens/s"] * 3 + ["ratio"]
    for f in rows:
        assert f["error"] is None, f["error"]
        assert f["value"] > 0 and len(f["samples"]) == 1
    # the section (~3 min on the default model) prints progress between its title and its figures
    out = capsys.readouterr().out
    for label in ("default config (top 6 layers, bf16 autocast)", "full fine-tune, fp32"):
        assert f"  learner: tiny, {label}: loading the learner\n" in out
        assert f"  learner: tiny, {label}: repetition 1/1, " in out


def test_sync_section_measures_bytes_and_seconds_per_sync(tmp_path):
    data = _run(tmp_path, "--only", "sync", "--model", "tiny")
    rows = {f["name"].split(": ", 1)[1]: f for f in data["figures"] if f["section"] == "sync"}
    assert all(f["error"] is None and f["value"] > 0 for f in rows.values()), rows
    assert rows["full fine-tune"]["extra"]["bytes"] == 4 * 3_219_776  # every fp32 weight of the tiny model
    # adapters only: 16 x (in + out) per projection, 7 projections a block, 2 blocks, fp32
    assert rows["LoRA r=16, every projection"]["extra"]["bytes"] == 4 * 2 * 16 * (128 + 96 + 96 + 128 + 3 * 192)


def test_the_trl_section_prints_a_line_per_step(tmp_path, capsys, monkeypatch):
    pytest.importorskip("trl")
    from eppo_train.benchmarks import model

    monkeypatch.setattr(model, "_cache", {})  # our side measured afresh, not reused from the learner test
    data = _run(tmp_path, "--only", "trl", "--model", "tiny")
    assert all(f["error"] is None and f["value"] > 0 for f in data["figures"]), data["figures"]
    out = capsys.readouterr().out  # progress before the figures: minutes on the default model
    assert "  trl: tiny: loading TRL's GRPOTrainer\n" in out and "  trl: tiny: TRL repetition 1/1, " in out
    assert "  trl: tiny, EPPO learner, full fine-tune fp32: repetition 1/1, " in out


def test_failing_section_is_reported_and_others_still_run(tmp_path):
    @section("_broken", "a section that cannot run", "0 s")
    def _broken(ctx):
        raise Unavailable("the thing it measures is not built")

    try:
        data = _run(tmp_path, "--only", "_broken,envs", "--envs", "GuessNumber")
    finally:
        SECTIONS.pop("_broken")
    broken = [f for f in data["figures"] if f["section"] == "_broken"]
    assert broken and broken[0]["value"] is None and "not built" in broken[0]["error"]
    assert any(f["section"] == "envs" and f["value"] for f in data["figures"])


def test_unknown_section_is_a_clear_error(tmp_path, capsys):
    assert bench.main(["--only", "nope", "--out", str(tmp_path / "r.json")]) == 2
    assert "unknown section" in capsys.readouterr().out


@pytest.mark.parametrize("reps", ["0", "-2"])
def test_repetitions_below_one_are_a_clear_error(tmp_path, capsys, reps):
    # --reps 0 is refused, not a "ZeroDivisionError" in every figure's cell, exit 0, written to the results file
    out = tmp_path / "r.json"
    assert bench.main(["--only", "sandbox", "--reps", reps, "--out", str(out)]) == 2
    assert "--reps must be at least 1" in capsys.readouterr().out and not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--only", "learner", "--model", "bogus"], "--model: model 'bogus' not found"),
    (["--only", "envs", "--envs", "zzz"], "--envs zzz: matches no registered env id"),
])
def test_a_model_or_env_filter_that_matches_nothing_is_one_line(tmp_path, capsys, args, message):
    # refused: each would run its sections as n/a rows ("no env is registered" for --envs zzz), exit 0, and replace
    # the previous results file with them
    out = tmp_path / "r.json"
    assert bench.main([*args, "--out", str(out)]) == 2
    printed = capsys.readouterr().out.strip()
    assert message in printed and len(printed.splitlines()) == 1 and not out.exists()


def test_the_rollout_workload_keeps_only_the_tasks_envs_names():
    # docs/bench.md: --envs filters the envs and rollout sections
    from eppo_train.benchmarks.common import BenchContext
    from eppo_train.benchmarks.rollout_engines import make_train_workload

    _, rc, problems = make_train_workload("tiny", False, BenchContext(envs="MathTool").wants_env)
    assert problems and {p.env_id for p in problems} == {"run/math-v0"}
    _, _, everything = make_train_workload("tiny", False)
    assert len({p.env_id for p in everything}) == 5


@pytest.mark.parametrize("args, title", [
    (["--reps", "1"], "median of 1 run)"), (["--reps", "2"], "median of 2 runs)"), ([], "median of 3 runs)"),
    (["--quick"], "median of 1 run, --quick)"), (["--quick", "--reps", "2"], "median of 2 runs, --quick)"),
])
def test_the_table_title_names_the_repetitions_run(args, title):
    # `make bench ARGS="--only sandbox --reps 1"`: the title names one run, not the sections' default of 3
    assert f"(median of {bench.reps_note(bench.context(bench.parse_args(args)))})".endswith(title)


def test_the_rollout_section_prints_a_line_per_turn(tmp_path, capsys):
    # the section's 25-35 minutes (an HF repetition ~13) print progress between its title and its figures
    data = _run(tmp_path, "--only", "rollout", "--model", "tiny", "--envs", "MathTool")
    out = capsys.readouterr().out
    assert "rollout: starting the hf engine" in out
    from eppo_train.benchmarks.common import BenchContext
    from eppo_train.benchmarks.rollout_engines import make_train_workload

    _, rc, problems = make_train_workload("tiny", False, BenchContext(envs="MathTool").wants_env)
    episodes = len(problems) * rc.group_size  # the pipeline's Math problems an iteration x G
    assert f"rollout: hf repetition 1/1: turn 1, episodes 0/{episodes}, " in out and "repetition 1/1: turn 2, " in out
    assert any(f["name"] == "hf: new tokens/s" and f["value"] for f in data["figures"])


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_every_section_is_listed(name, capsys):
    assert bench.main(["--list"]) == 0
    assert name in capsys.readouterr().out


@pytest.mark.slow
def test_rollout_section_runs_both_engines_on_the_default_model(tmp_path):
    """The make-train rollout workload through vLLM and HF in one run (quick: two tasks, short turns)."""
    data = _run(tmp_path, "--only", "rollout")
    names = {f["name"]: f for f in data["figures"] if f["section"] == "rollout"}
    for name in ("vllm: new tokens/s", "hf: new tokens/s", "vllm / hf new tokens/s (same run)",
                 "hf: share of the bf16 matmul rate"):
        assert name in names and names[name]["error"] is None and names[name]["value"] > 0, (name, names.get(name))


def test_retriever_measures_the_functions_the_bench_section_calls():
    # every helper the retriever section calls exists in its workload module
    from eppo_envs.benchmarks import retriever
    from eppo_envs.tools.retriever import Document, make_retriever

    docs = [Document(str(i), f"title {i}", f"word{i} shared text about item {i}") for i in range(20)]
    queries = ["word3 item", "shared text", "title 7"]
    result = retriever.measure("bm25s", docs, queries)
    assert result.num_docs == 20 and result.num_queries == 3 and result.queries_per_s > 0
    index = make_retriever("bm25s")
    index.index(docs)
    latencies, wall = retriever.time_queries(index, queries)
    assert len(latencies) == 3 and wall >= sum(latencies) > 0
    assert callable(retriever.wordnet_workload)
