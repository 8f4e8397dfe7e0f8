"""Our learner against TRL's `GRPOTrainer` on the same model and batch (needs `pip install eppo[trl]`).

What is compared, exactly: one policy update on a pre-generated batch (rows x (prompt + completion) tokens,
every completion token in the loss), full fine-tune, fp32, one optimizer step, on the same model.
- TRL: `GRPOTrainer.compute_loss` on the batch as its `_prepare_inputs` would hand it over (prompt/completion ids
  and masks, advantages; `num_iterations=1`, so TRL uses the detached current log-probs as "old" ones and makes no
  extra pass), then `accelerator.backward`, grad-norm clipping, and `AdamW.step`. Generation, reward functions and
  the trainer's logging loop are not timed: the batch is handed to the loss directly.
- Ours: `Learner.train_step` with the same settings, which includes a no-grad pass over the batch (the sampling
  log-probs recomputed with the training model, and the per-task entropies EPPO paces by) that TRL does not make.
Both: the first step untimed; tokens/s = rows x (prompt + completion) / seconds of one update. ratio > 1: ours faster.
"""

from __future__ import annotations

import time

from eppo_train.benchmarks.common import BenchContext, Figure, figure, need_module, note, section
from eppo_train.benchmarks.model import FULL_FP32, BatchShape, measure_learner, shape_for
from eppo_train.policy.models import load_model, load_tokenizer


def _trl_inputs(shape: BatchShape, vocab: int, seed: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    rows = shape.rows
    return {
        "prompt_ids": torch.randint(100, vocab, (rows, shape.prompt), generator=g),
        "prompt_mask": torch.ones(rows, shape.prompt, dtype=torch.long),
        "completion_ids": torch.randint(100, vocab, (rows, shape.completion), generator=g),
        "completion_mask": torch.ones(rows, shape.completion, dtype=torch.long),
        "advantages": torch.tensor([1.0 if r % 2 else -1.0 for r in range(rows)]),
        "num_items_in_batch": torch.tensor(float(rows * shape.completion)),
    }


def measure_trl(model_name: str, shape: BatchShape, reps: int) -> list[float]:
    """Tokens/s of TRL's GRPO update (loss + backward + clip + AdamW) on a pre-generated batch, per repetition."""
    import tempfile

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer


    note("trl", f"{model_name}: loading TRL's GRPOTrainer")
    torch.manual_seed(0)
    model = load_model(model_name, dtype="float32")
    tokenizer = load_tokenizer(model_name)
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(output_dir=out, per_device_train_batch_size=shape.rows, num_generations=shape.rows,
                          max_completion_length=shape.completion, learning_rate=1e-6, beta=0.0, loss_type="grpo",
                          bf16=False, use_cpu=True, report_to=[], save_strategy="no", max_grad_norm=1.0)
        trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions), args=args,
                              train_dataset=Dataset.from_dict({"prompt": ["x"] * shape.rows}),
                              processing_class=tokenizer)
        trainer.create_optimizer()
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1  # set by Trainer's own loop, which we bypass

        def step(seed: int) -> float:
            inputs = _trl_inputs(shape, trainer.model.config.vocab_size, seed)
            t0 = time.perf_counter()
            loss = trainer.compute_loss(trainer.model, inputs)
            trainer.accelerator.backward(loss)
            torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), args.max_grad_norm)
            trainer.optimizer.step()
            trainer.optimizer.zero_grad(set_to_none=True)
            return shape.tokens / (time.perf_counter() - t0)

        step(99)  # warm-up, untimed
        note("trl", f"{model_name}: TRL warm-up step done")
        out = []
        for rep in range(reps):
            out.append(step(rep))
            note("trl", f"{model_name}: TRL repetition {rep + 1}/{reps}, {out[-1]:,.0f} tokens/s")
        return out


@section("trl", "learner vs TRL GRPOTrainer (same model, batch)", "3 min")
def bench_trl(ctx: BenchContext) -> list[Figure]:
    trl = need_module("trl", "the TRL reference (pip install eppo[trl])")
    shape = shape_for(ctx)
    reps = ctx.reps()
    theirs = measure_trl(ctx.model, shape, reps)
    ours = measure_learner(ctx.model, shape, FULL_FP32, reps, section="trl", label="EPPO learner, full fine-tune fp32")
    how = (f"{ctx.model}, full fine-tune fp32, {shape.describe()}, one update (loss+backward+clip+AdamW) on a "
           f"pre-generated batch; TRL {trl.__version__} GRPOTrainer.compute_loss vs Learner.train_step")
    ratio = [o / t for o, t in zip(sorted(ours), sorted(theirs), strict=True)]
    return [
        figure("trl", f"TRL {trl.__version__} GRPOTrainer update", theirs, "tokens/s", how),
        figure("trl", "EPPO Learner update (same settings)", ours, "tokens/s", how),
        figure("trl", "EPPO learner / TRL", ratio, "ratio", how + "; ratio of the sorted repetitions"),
    ]
