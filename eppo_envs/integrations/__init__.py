"""Adapters for other trainers: `eppo_envs.integrations.trl` (TRL's GRPOTrainer). See docs/interop.md."""
