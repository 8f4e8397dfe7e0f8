"""The env side's benchmarks, one home: each task's expert (`experts.py`, steps/s), the code sandbox (`sandbox.py`,
runs/s) and the retriever backends (`retriever.py`, build time, queries/s, latency on the searchqa task's WordNet
corpus).

They live beside the tasks, not in `tools/`: a benchmark's standard workload may come from a task, and the shared
layers (`core/`, `tools/`) never import one. `make bench` (eppo_train/benchmarks/) reports them with the rest;
the experts run from `eppo-envs expert|bench`, the sandbox and retriever from
`python -m eppo_envs.benchmarks.sandbox` / `.retriever`.
"""
