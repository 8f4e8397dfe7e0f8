"""The multi-loss study: its plan, runner, result files, report and figures."""
