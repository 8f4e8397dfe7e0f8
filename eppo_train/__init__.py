"""eppo_train: one policy trained on every EPPO task at once (GRPO family, entropy-paced clipping)."""
