"""Numbers and output of a run: the metrics log, live progress, plots and the pipeline's summary."""
