"""Bench sections for `python -m eppo_train.bench` (see eppo_train/bench.py and docs/bench.md)."""
