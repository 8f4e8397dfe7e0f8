"""`make bench`, one home: `run.py` is the command (`python -m eppo_train.benchmarks`), `common.py` the section
registry and figure records, and one module per group of sections (envs, tools, model, rollout_engines, trl_ref,
memory).
The env-side measurements they call live in `eppo_envs.benchmarks`. docs/bench.md says what each figure means.
"""
