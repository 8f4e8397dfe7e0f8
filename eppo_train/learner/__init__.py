"""Samples into new weights: the learner, its frozen-layer cache, and the workers (in process or Ray actors) that host it and the generator."""
