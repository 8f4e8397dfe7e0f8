"""Is ALFWorld > 0 after SFT? The cheapest probe: SFT on ALFWorld demos alone, then a greedy evaluation.

    python scripts/alfworld_sft_probe.py --out /tmp/alf/on --show-admissible compact
    python scripts/alfworld_sft_probe.py --out /tmp/alf/off --show-admissible off
    python scripts/alfworld_sft_probe.py --out /tmp/alf/sft-listed --policy runs/<run>/sft --show-admissible compact

The pipeline's settings (eppo_train/configs/pipeline.yaml: model, lr, batch, top layers, 2048-token transcripts,
64-token replies) with only the ALFWorld task; the demo count, steps, turn limits and the env option are flags.
Writes <out>/sft/ (the model and sft.json), <out>/eval.json and <out>/probe.json (figures and wall times).
With --policy DIR nothing is trained: DIR (e.g. a pipeline run's SFT model) is evaluated with the env option.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--show-admissible", default="off", help="off | all | compact")
    p.add_argument("--expert", default="planner", help="planner | explorer (the demonstrations' expert)")
    p.add_argument("--episodes", type=int, default=32, help="expert episodes (train split)")
    p.add_argument("--steps", type=int, default=24, help="SFT steps (batch 8)")
    p.add_argument("--demo-turns", type=int, default=8, help="turn limit of the demonstrations")
    p.add_argument("--eval-episodes", type=int, default=32, help="valid_unseen seeds 0..N-1")
    p.add_argument("--eval-turns", type=int, default=10)
    p.add_argument("--backend", default="vllm")
    p.add_argument("--policy", type=Path, help="evaluate this model folder instead of training one")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from eppo_train.config import load_config
    from eppo_train.pipeline import evaluate_model
    from eppo_train.sft import run_sft
    from eppo_train.tasks import prepare_tasks

    kwargs: dict = {"show_admissible": args.show_admissible}
    if args.expert != "planner":
        kwargs["expert"] = args.expert
    overrides = [f"sft.steps={args.steps}", f"sft.episodes={args.episodes}", f"model.backend={args.backend}",
                 f"evaluation.episodes={args.eval_episodes}", f"evaluation.max_turns={args.eval_turns}",
                 f"rollout.max_turns={max(args.demo_turns, args.eval_turns)}"]
    cfg = load_config("pipeline", overrides)
    cfg.env.tasks = [t for t in cfg.env.tasks if t.id == "eppo/ALFWorld-v0"]
    cfg.env.tasks[0].kwargs = kwargs
    cfg.env.tasks[0].max_turns = args.demo_turns
    slots = prepare_tasks(cfg)
    args.out.mkdir(parents=True, exist_ok=True)
    load = open("/proc/loadavg").read().split()[:3]
    t0 = time.perf_counter()
    model = args.policy or args.out / "sft"
    info: dict = {"per_task": {}, "loss_first_step": None, "loss_last_steps": None}
    if args.policy is None:
        info = run_sft(cfg, slots, model,
                       on_step=lambda i, loss: print(f"step {i + 1}/{cfg.sft.steps} loss {loss:.4f}", flush=True))
        print(json.dumps(info["per_task"]), f"demos {info['demo_seconds']:.0f} s, train {info['train_seconds']:.0f} s",
              flush=True)
    sft_s = time.perf_counter() - t0
    # the evaluation plays valid_unseen with the same env option, at the evaluation's turn limit
    cfg.env.tasks[0].max_turns = args.eval_turns
    slots = prepare_tasks(cfg)
    t1 = time.perf_counter()
    report = evaluate_model(cfg, slots, str(model))
    eval_s = time.perf_counter() - t1
    (args.out / "eval.json").write_text(json.dumps(report, indent=1))
    task = report["tasks"]["alfworld"]
    probe = {"args": {k: str(v) for k, v in vars(args).items()}, "load_start": load,
             "load_end": open("/proc/loadavg").read().split()[:3], "sft_seconds": sft_s, "eval_seconds": eval_s,
             "expert": info["per_task"], "loss_first_step": info["loss_first_step"],
             "loss_last_steps": info["loss_last_steps"],
             **{k: task[k] for k in ("success", "success_ci95", "invalid_action_rate", "mean_turns", "truncated")}}
    (args.out / "probe.json").write_text(json.dumps(probe, indent=1))
    print(json.dumps(probe, indent=1))


if __name__ == "__main__":
    main()
