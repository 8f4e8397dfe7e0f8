"""Evaluation: the library (EvalSpec -> EvalReport), a run's fixed set, the group-signal probe and the `eppo-eval` command."""
