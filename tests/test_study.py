"""The study (`make experiment`): one result file per run, done runs skipped, interrupted runs resumed, and the
report (tables, paired intervals, figures) rebuilt from result files alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

# the tiny random model (hf backend: vLLM's CPU attention has no kernel for head size 16), two GuessNumber
# settings, the smallest batches that still train: seconds per run
TINY = ["sft.steps=0", "run.save_every=1", "evaluation.episodes=2", "env.tasks.0.problems=1",
        "env.tasks.1.problems=1", "rollout.group_size=2", "rollout.max_new_tokens=6"]


def test_study_writes_results_resumes_and_skips_done_runs(tmp_path: Path, capsys, monkeypatch):
    from eppo_train.cli import main
    from eppo_train.config import load_config
    from eppo_train.study.plan import StudyPaths, make_plan
    from eppo_train.study.runner import run_config, run_study
    from eppo_train.trainer import Trainer

    plan = make_plan(["grpo", "eppo"], 1, [], 1)
    paths = StudyPaths(tmp_path / "work", tmp_path / "results", tmp_path / "report" / "study.md")
    # an interrupted run: grpo-seed0 stopped after iteration 1 of 2, its checkpoint left behind
    partial = load_config("study-quick", [*TINY, "run.iterations=1"])
    Trainer(run_config(partial, plan[0], "tiny", paths.work)).run()

    cfg = load_config("study-quick", [*TINY, "run.iterations=2"])
    report = run_study(cfg, plan, paths, command="pytest")
    grpo = json.loads((paths.results / "grpo-seed0.json").read_text())
    eppo = json.loads((paths.results / "eppo-seed0.json").read_text())
    assert grpo["resumed_from_step"] == 1 and eppo["resumed_from_step"] == 0
    for rec, algo in ((grpo, "grpo"), (eppo, "eppo")):
        assert rec["algo"] == algo and rec["config"]["algo"]["name"] == algo and rec["command"] == "pytest"
        assert rec["memory_peak_gb"]["total"] >= rec["memory_peak_gb"]["driver"] > 0.1  # the run's peak RSS
        assert [it["step"] for it in rec["iterations"]] == [1, 2]
        assert set(rec["iterations"][0]["tasks"]) == {"guess_small", "guess_large"}
        for v in rec["iterations"][-1]["tasks"].values():
            assert {"success", "entropy", "entropy_ema", "eps_low", "eps_high", "clip_frac"} <= set(v)
        for t in ("guess_small", "guess_large"):
            out = rec["evaluation"]["tasks"][t]["outcomes"]
            assert out["seeds"] == [0, 1] and len(out["won"]) == 2
            assert rec["evaluation"]["tasks"][t]["reward_revision"] == 1
        assert rec["training_episodes"] == 2 * 2 * 2 and rec["wall_seconds"] > 0 and len(rec["load"]["start"]) == 3
    assert json.loads((paths.results / "plan.json").read_text())["runs"][1]["name"] == "eppo-seed0"
    from eppo_train.study.runner import stale_results

    assert stale_results(cfg, plan, paths.results, paths.work) == {}
    changed = load_config("study-quick", [*TINY, "run.iterations=2", "learner.lr=0.5"])
    assert stale_results(changed, plan, paths.results, tmp_path / "elsewhere") == {
        "grpo-seed0": ["learner.lr"], "eppo-seed0": ["learner.lr"]}  # another scratch folder alone is not a change
    start = json.loads((paths.results / "start-model.json").read_text())  # the baseline, evaluated once
    assert start["evaluation"]["tasks"]["guess_small"]["outcomes"]["seeds"] == [0, 1]
    text = report.read_text()
    assert "| grpo | 0 |" in text and "| eppo | 0 |" in text and "mean − grpo" in text
    assert "| start model (before RL) |" in text and "mean − start" in text
    assert "clipped at 1 − ε_low (%)" in text and "| grpo | " in text.split("How much the clip acted")[1]
    assert all((report.parent / "figures" / f).stat().st_size > 0
               for f in ("results-entropy.png", "results-success.png", "results-eps.png"))

    assert "Scored by earlier rewards" not in text

    # a second invocation on another machine: only the result files are there; nothing is trained again. The
    # task's reward has changed since (one listed change): the runs still count as done, the study says they were
    # scored by the earlier reward, and so does the report
    from eppo_envs.example.guess_number import GuessNumberEnv

    monkeypatch.setattr(GuessNumberEnv, "reward_changes", ("2026-12-07: a guess out of range loses",))
    shutil.rmtree(paths.work)
    (report.parent / "figures" / "results-success.png").unlink()
    capsys.readouterr()
    assert main(["study", "--quick", "--algos", "grpo,eppo", "--seeds", "1", "--ablations", "none",
                 "--out", str(paths.work), "--results", str(paths.results), "--report", str(report),
                 *(a for o in TINY for a in ("--set", o))]) == 0
    out = capsys.readouterr().out
    assert "every run is done" in out
    assert ("study: warning: guess_small's reward has changed since eppo-seed0, grpo-seed0, start-model were "
            "scored (revision 1 there, 2 now)") in out
    assert not paths.work.exists()
    assert (report.parent / "figures" / "results-success.png").exists()
    text = report.read_text()
    assert ("- **guess_small** (`example/GuessNumber-v0`, revision 2 today): revision 1 in every result file. "
            "Changed since:\n  - 2026-12-07: a guess out of range loses") in text
    assert "The rewards of guess_small, guess_large have changed since these runs" in text


FLAT = [{"a": 1.0, "b": 0.5}] * 3  # three iterations without a crossover or a spike


def _result(group: str, seed: int, won: dict[str, list[int]], entropy: list[dict[str, float]] = FLAT) -> dict:
    """A hand-made result file: per-iteration per-task entropies (the report counts crossovers and spikes from
    them, study/dynamics.py) and per-instance evaluation outcomes."""
    iterations = []
    for i, h in enumerate(entropy):
        iterations.append({"step": i + 1, "success": 0.5, "iteration_time_s": 10.0,
                           "tasks": {t: {"success": 0.1 * i, "entropy": h.get(t, 1.0), "entropy_ema": 1.0,
                                         "eps_low": 0.2, "eps_high": 0.28, "clip_low_frac": 0.01 * i,
                                         "clip_high_frac": 0.005} for t in won},
                           "crossovers": [], "spikes": []})
    return {
        "schema": 1, "name": f"{group}-seed{seed}", "group": group, "algo": group.split("-")[0], "seed": seed,
        "overrides": [], "command": "hand", "date": "2026-12-01T00:00:00Z", "wall_seconds": 60.0,
        "train_seconds": 50.0, "eval_seconds": 10.0, "load": {"start": [1.0, 1.0, 1.0], "end": [1.0, 1.0, 1.0]},
        "machine": {"cpus": 2}, "resumed_from_step": 0,
        "start_model": {"base_model": "m", "model": "m", "how": "hand", "sha256": "ab" * 32},
        "config": {"run": {"iterations": len(entropy)}, "rollout": {"group_size": 2},
                   "pacing": {"beta": 0.9, "tau": 0.5}},
        "training_episodes": 16, "iterations": iterations,
        "crossovers": 0, "spikes": 0,
        "evaluation": {"episodes_per_task": 4, "tasks": {
            t: {"success": sum(w) / len(w), "split": "test",
                "outcomes": {"seeds": list(range(len(w))), "won": [bool(x) for x in w], "reward": w}}
            for t, w in won.items()}},
    }


def _write(folder: Path, records: list[dict], plan: list[str]) -> None:
    folder.mkdir(parents=True)
    for r in records:
        (folder / f"{r['name']}.json").write_text(json.dumps(r))
    (folder / "plan.json").write_text(json.dumps({"runs": [{"name": n} for n in plan]}))


def test_report_from_hand_made_result_files(tmp_path: Path):
    from eppo_train.study.record import load_results
    from eppo_train.study.report import by_group, paired, write_report

    results = tmp_path / "study"
    # entropies, smoothed by 0.5 (study/dynamics.py): grpo-seed0's a falls 1.0, 0.4, 0.1 (smoothed 1.0, 0.7, 0.4)
    # under b's 0.5, 0.5, 0.9 (smoothed 0.5, 0.5, 0.7) at iteration 3, where b jumps over 1.5 x 0.5: one crossover,
    # one spike of b. grpo-seed1: a's smoothed 0.55 passes under b's 0.6 at iteration 2. eppo-seed1: a spikes at
    # iteration 3 (1.0 > 1.5 x 0.5), always above b.
    g0 = [{"a": 1.0, "b": 0.5}, {"a": 0.4, "b": 0.5}, {"a": 0.1, "b": 0.9}]
    g1 = [{"a": 1.0, "b": 0.6}, {"a": 0.1, "b": 0.6}, {"a": 0.1, "b": 0.6}]
    e1 = [{"a": 0.5, "b": 0.2}, {"a": 0.5, "b": 0.2}, {"a": 1.0, "b": 0.2}]
    # task a: eppo wins 2 more instances than grpo over 8 paired ones (+0.25); task b: identical outcomes (0)
    _write(results, [
        _result("grpo", 0, {"a": [1, 0, 0, 0], "b": [1, 1, 0, 0]}, g0),
        _result("grpo", 1, {"a": [0, 0, 0, 0], "b": [1, 1, 0, 0]}, g1),
        _result("eppo", 0, {"a": [1, 1, 0, 0], "b": [1, 1, 0, 0]}),
        _result("eppo", 1, {"a": [1, 0, 0, 0], "b": [1, 1, 0, 0]}, e1),
    ], plan=["grpo-seed0", "grpo-seed1", "eppo-seed0", "eppo-seed1", "dapo-seed0"])

    groups = by_group(load_results(results))
    p = paired(groups["grpo"], groups["eppo"], ["a", "b"])
    assert p is not None and p.seeds == [0, 1]
    assert p.per_task["a"].estimate == pytest.approx(0.25) and p.per_task["b"].estimate == 0.0
    assert p.per_task["b"].lo == p.per_task["b"].hi == 0.0  # no instance differs: a zero-width interval
    assert p.overall.estimate == pytest.approx(0.125)
    assert p.per_seed == {0: pytest.approx(0.125), 1: pytest.approx(0.125)}
    # the same gain on both seeds: no spread between seeds, a zero-width t interval; both runs of a seed began from
    # the same weights, so no pair is marked; shown() needs the pooled interval too, and it reaches 0 here
    assert p.over_seeds is not None and p.over_seeds.lo == pytest.approx(0.125) == p.over_seeds.hi
    assert p.other_start == [] and p.over_seeds.excludes_zero() and not p.overall.excludes_zero()
    assert not p.shown()
    # differences in {0, 1} on 2 of 8 instances of task a: the resampled mean over tasks stays in [0, 0.5]
    assert 0.0 <= p.overall.lo < 0.125 < p.overall.hi <= 0.5

    report = write_report([("Hand-made", results)], tmp_path / "study.md")
    text = report.read_text()
    # the same result files give the same bytes (a line saying when the report was written would change the
    # committed report at every `make study-report`), dated by the newest run
    assert write_report([("Hand-made", results)], tmp_path / "study.md").read_text() == text
    assert "the newest run begun 2026-12-01 00:00 UTC. Runs done: 4 of 5 planned" in text
    # success a, b, mean, worst task (grpo: 0.25 and 0 by seed), crossovers, spikes
    assert "| grpo | 0, 1 | 0.12 ± 0.18 | 0.50 ± 0.00 | **0.31 ± 0.09** | 0.12 ± 0.18 | 1.00 ± 0.00 | 0.50 ± 0.71 |" in text
    assert "| eppo | 0, 1 | 0.38 ± 0.18 | 0.50 ± 0.00 | **0.44 ± 0.09** | 0.38 ± 0.18 | 0.00 ± 0.00 | 0.50 ± 0.71 |" in text
    assert f"| eppo | 2 | **{p.overall.fmt(2, signed=True)}** |" in text
    assert "| grpo-seed0 | 1 | 3 | 1 | b 1 |" in text  # crossovers, first at, spikes, by task
    assert "| grpo-seed1 | 1 | 2 | 0 | – |" in text
    # clip: low 0, 1, 2 % and high 0.5 % over three iterations: 1.0 % and 0.5 %, 1.5 % in all (the 1 % aim met)
    assert "| grpo | 1.00 ± 0.00 | 0.50 ± 0.00 |" in text
    assert "the clip acted on 1.50 % of a task's tokens per iteration on average" in text and " meets the 1 %" in text
    assert "missing: dapo-seed0" in text and "**The study is incomplete**" in text
    assert "- **Hand-made**: eppo − grpo " in text  # the verdict in brief, at the top
    for name in ("study-entropy.png", "study-success.png", "study-eps.png"):
        assert (tmp_path / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # another evaluation set (different instances) is never paired
    other = _result("eppo", 0, {"a": [1, 1, 0, 0], "b": [1, 1, 0, 0]})
    other["evaluation"]["tasks"]["a"]["outcomes"]["seeds"] = [4, 5, 6, 7]
    q = paired(groups["grpo"], [other], ["a", "b"])
    assert q is not None and q.tasks_skipped == ["a"] and set(q.per_task) == {"b"}


def test_study_report_errors_are_one_line(tmp_path: Path, capsys):
    from eppo_train.cli import main

    assert main(["study-report", "--results", str(tmp_path / "none")]) == 2
    assert "no study results folder" in capsys.readouterr().err
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "grpo-seed0.json").write_text("{oops")
    assert main(["study-report", "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "grpo-seed0.json: not valid JSON" in err and len(err.strip().splitlines()) == 1
    # an empty folder (or one with only the plan) wrote an "incomplete" report of nothing and exited 0
    (tmp_path / "r" / "grpo-seed0.json").unlink()
    (tmp_path / "r" / "plan.json").write_text(json.dumps({"runs": [{"name": "grpo-seed0"}]}))
    assert main(["study-report", "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "no study result files in" in err and "0 of 1 planned" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.md").exists()


def test_study_report_writes_where_the_study_wrote_it(tmp_path: Path, capsys):
    # `study --quick` writes runs/study-study-quick/{results/, study.md}; study-report on that results folder
    # wrote results.md beside it, not the study.md its --help promised
    from eppo_train.cli import main

    _write(tmp_path / "quick" / "results", [_result("grpo", 0, {"a": [1, 0]})], plan=["grpo-seed0"])
    assert main(["study-report", "--results", str(tmp_path / "quick" / "results")]) == 0
    assert (tmp_path / "quick" / "study.md").is_file() and not (tmp_path / "quick" / "results.md").exists()


def test_study_rejects_an_unknown_loss_or_ablation(tmp_path: Path, capsys):
    from eppo_train.cli import main

    assert main(["study", "--quick", "--algos", "grpo,nope", "--out", str(tmp_path / "x")]) == 2
    assert main(["study", "--quick", "--ablations", "eppo-nope", "--out", str(tmp_path / "x")]) == 2
    assert "unknown ablation 'eppo-nope'" in capsys.readouterr().err


def test_plan_names_and_ablation_configs(tmp_path: Path):
    from eppo_train.config import load_config
    from eppo_train.study.plan import ABLATIONS, make_plan
    from eppo_train.study.runner import run_config

    plan = make_plan(["grpo", "eppo"], 3, list(ABLATIONS), 1)
    names = [r.name for r in plan]
    assert names[:6] == [f"{a}-seed{s}" for s in range(3) for a in ("grpo", "eppo")]  # seed-major
    assert "eppo-high-seed0" in names and len(names) == 6 + len(ABLATIONS)
    cfg = load_config("study")
    high = run_config(cfg, next(r for r in plan if r.group == "eppo-high"), "m", tmp_path)
    lam = run_config(cfg, next(r for r in plan if r.group == "eppo-lam0.25"), "m", tmp_path)
    assert high.algo.name == "eppo" and high.pacing.variant == "high" and high.run.name == "eppo-high-seed0"
    assert lam.pacing.lam == 0.25 and lam.pacing.variant == "both"
    assert cfg.run.iterations >= 20 and cfg.evaluation.episodes >= 64
    assert cfg.learner.mini_batches * cfg.learner.epochs >= 2  # one step per batch: ratios are 1, no clip acts


def test_study_warm_start_is_the_one_its_committed_runs_began_from():
    """`sft.tasks_from: study-sft`: the study trains RL on three tasks but warms up on the five tasks `make train`
    had when the study began; the SFT cache key is the one in the committed start record, so a later change to the
    pipeline's recipe cannot move the study's start model under its results."""
    import json

    from eppo_train.config import load_config
    from eppo_train.rollout.task_slots import prepare_tasks
    from eppo_train.sft import sft_key, sft_source

    study, pipeline = load_config("study"), load_config("pipeline")
    src, slots = sft_source(study, prepare_tasks(study))
    assert [s.label for s in slots] == [s.label for s in prepare_tasks(pipeline)] and len(slots) == 5
    assert [s.label for s in prepare_tasks(study)] == ["searchqa", "math", "code"]
    start = json.loads((Path(__file__).parents[1] / "docs/results/study-archive-r1/study/start-model.json").read_text())
    assert start["start_model"]["model"].endswith(f"sft-{sft_key(src, slots)}")


@pytest.mark.slow
@pytest.mark.timeout(2400)  # 2 cores: 220 s at load ~4 (SFT cached), over 15 min at load ~12
def test_experiment_quick_end_to_end(tmp_path: Path):
    from eppo_train.cli import main

    out = tmp_path / "quick"
    assert main(["study", "--quick", "--out", str(out)]) == 0
    for algo in ("grpo", "dapo", "eppo"):
        for seed in range(3):
            assert (out / "results" / f"{algo}-seed{seed}.json").exists()
    text = (out / "study.md").read_text()
    assert "| dapo | 0, 1, 2 |" in text and (out / "figures" / "results-entropy.png").exists()


def test_a_field_added_later_with_default_none_is_not_a_change_but_a_list_item_is():
    from eppo_train.study.runner import _flat

    then = {"env": {"tasks": [{"id": "a", "max_turns": 4}]}, "sft": {"tasks_from": "pipeline"}}
    now = {"env": {"tasks": [{"id": "a", "max_turns": 4, "max_new_tokens": None}]}, "sft": {"tasks_from": "x"}}
    flat_then, flat_now = _flat(then), _flat(now)
    assert flat_now["env.tasks.0.max_new_tokens"] is None and "env.tasks.0.max_new_tokens" not in flat_then
    assert all(flat_now.get(k) == flat_then.get(k) for k in flat_now if k != "sft.tasks_from")
    moved = {"env": {"tasks": [{"id": "a", "max_turns": 6}]}}
    assert _flat(moved)["env.tasks.0.max_turns"] != flat_then["env.tasks.0.max_turns"]


def test_each_run_is_paired_with_the_start_model_it_began_from(tmp_path: Path):
    """A machine whose SFT comes out with other weights evaluates its own start model (start-model-<sha12>.json);
    the report pairs every run with its own start, not with the first one."""
    from eppo_train.study.record import START_FILE, load_results, load_starts, start_path
    from eppo_train.study.report import write_report

    results = tmp_path / "study"
    old = _result("grpo", 0, {"a": [1, 1, 0, 0]})
    new = _result("grpo", 1, {"a": [1, 1, 1, 0]})
    new["start_model"] = dict(new["start_model"], sha256="cd" * 32)
    _write(results, [old, new], plan=["grpo-seed0", "grpo-seed1"])

    def start_of(run: dict, won: list[int]) -> dict:
        rec = _result("start-model", 0, {"a": won})
        return {"schema": 1, "name": "start-model", "start_model": run["start_model"], "evaluation": rec["evaluation"]}

    assert start_path(results, old["start_model"]).name == START_FILE  # no start evaluated yet: the first file
    (results / START_FILE).write_text(json.dumps(start_of(old, [0, 0, 0, 0])))
    assert start_path(results, old["start_model"]).name == START_FILE
    other = start_path(results, new["start_model"])
    assert other.name == "start-model-" + "cd" * 6 + ".json"
    other.write_text(json.dumps(start_of(new, [1, 1, 1, 0])))

    assert [r["name"] for r in load_results(results)] == ["grpo-seed0", "grpo-seed1"]  # start files are not runs
    assert list(load_starts(results)) == ["ab" * 6, "cd" * 6]
    text = write_report([("Starts", results)], tmp_path / "study.md").read_text()
    # seed 0 gained +0.50 over its start (0 -> 2 of 4); seed 1 gained 0 over its own (3 -> 3), not +0.75 over the first
    assert "| grpo | 2 |" in text and "0: +0.50 1: +0.00" in text
    # gains +0.50 and 0 over two seeds: t(0.975, 1) = 12.706, sd 0.35355, half-width 12.706 * 0.35355 / sqrt(2)
    assert "| +0.25 [-2.93, +3.43] |" in text
    assert f"| start model `{'ab' * 6}` (before RL) |" in text and f"| start model `{'cd' * 6}` (before RL) |" in text
    assert "the runs did not all start from the same weights" in text


def test_results_scored_by_an_earlier_reward_are_told_apart(tmp_path: Path):
    """A record names the reward revision each task was scored by (none recorded: revision 1, the rewards before
    every listed change); the report lists, per task, which records an earlier revision scored and what changed
    since; records scored by today's reward, and tasks it cannot look up, are not listed."""
    from eppo_envs.math.env import MathToolEnv
    from eppo_train.study.record import reward_drift
    from eppo_train.study.report import write_report

    def run(group: str, seed: int, math_revision: int | None) -> dict:
        record = _result(group, seed, {"math": [1, 0], "mine": [0, 1]})
        record["config"]["env"] = {"tasks": [{"id": "eppo/MathTool-v0", "name": "math"},
                                             {"id": "mylab/NotImported-v0", "name": "mine"}]}
        if math_revision is not None:
            record["evaluation"]["tasks"]["math"]["reward_revision"] = math_revision
        return record

    now = MathToolEnv.reward_revision()
    assert now == 1 + len(MathToolEnv.reward_changes) >= 2
    results = tmp_path / "study"
    _write(results, [run("grpo", 0, None), run("grpo", 1, now), run("eppo", 0, 1)],
           plan=["grpo-seed0", "grpo-seed1", "eppo-seed0"])
    from eppo_train.study.record import load_results

    [drift] = reward_drift(load_results(results))
    assert (drift.task, drift.env_id, drift.now) == ("math", "eppo/MathTool-v0", now)
    assert drift.scored == {1: ["eppo-seed0", "grpo-seed0"]} and drift.changes == list(MathToolEnv.reward_changes)
    text = write_report([("Drift", results)], tmp_path / "study.md").read_text()
    assert (f"- **math** (`eppo/MathTool-v0`, revision {now} today): revision 1 in eppo-seed0, grpo-seed0. "
            "Changed since:\n" + "".join(f"  - {change}\n" for change in MathToolEnv.reward_changes)) in text
    assert "**mine**" not in text
    assert reward_drift([run("grpo", 1, now)]) == []


def test_the_archived_study_report_says_which_rewards_changed_since():
    """The archived study (2026-12-01/02) predates the reward changes of 2026-12-06, the Math grader's among them:
    its report, built from the result files, says so."""
    root = Path(__file__).parents[1]
    from eppo_train.study.record import load_results, load_starts, reward_drift

    results = root / "docs/results/study-archive-r1/study"
    drift = reward_drift([*load_results(results), *load_starts(results).values()])
    assert {d.task for d in drift} == {"searchqa", "math", "code"}
    text = (root / "docs/results/study-archive-r1/study.md").read_text()
    for d in drift:
        assert f"- **{d.task}** (`{d.env_id}`, revision {d.now} today): revision 1 in every result file." in text


def test_committed_study_runs_match_their_shipped_study_config():
    """Every committed run of a study was made with the settings `eppo-train study` would use now (an option added
    since, at its default, is no change) and scored by today's rewards: a result file that is not is never left
    among the current study's."""
    from eppo_train.config import load_config
    from eppo_train.study.plan import OFFICIAL
    from eppo_train.study.record import load_results, load_starts, reward_drift
    from eppo_train.study.runner import stale_results

    root = Path(__file__).parents[1]
    for study in OFFICIAL:
        results = root / study.results
        plan = study.plan()
        assert stale_results(load_config(study.config), plan, results, Path("runs/x")) == {}, study.name
        if results.is_dir():
            assert reward_drift([*load_results(results), *load_starts(results).values()]) == [], study.name


def test_the_committed_studies_plan_and_config():
    """`make experiment` runs the pace testbed (10 seeds x 4 losses, 10 pacing ablations x 3 seeds) and then the
    suite (3 seeds x 4 losses), in the regime where the clip acts (several steps per batch, stale sampling)."""
    from eppo_train.config import load_config
    from eppo_train.study.plan import ABLATIONS, OFFICIAL

    testbed, suite = OFFICIAL
    plan = testbed.plan()
    assert len(plan) == 4 * 10 + len(ABLATIONS) * 3 and len(ABLATIONS) == 10
    assert [r.name for r in plan[:5]] == ["grpo-seed0", "dapo-seed0", "eppo-seed0", "clip_cov-seed0", "grpo-seed1"]
    assert plan[40].name == "eppo-high-seed0" and plan[50].name == "eppo-high-seed1"  # ablations seed-major too
    assert [r.name for r in suite.plan()][-1] == "clip_cov-seed2" and len(suite.plan()) == 12
    for study in OFFICIAL:
        cfg = load_config(study.config)
        steps = cfg.learner.mini_batches * cfg.learner.epochs
        assert steps >= 4 and cfg.learner.staleness >= 1, study.name  # off-policy: the clip bound can act
        assert study.results.parts[-2:] == ("study", study.name)
    assert [t.name for t in load_config("study-testbed").env.tasks] == ["echo", "add", "sort", "guess"]
