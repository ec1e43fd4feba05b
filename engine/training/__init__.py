"""Training: the method-agnostic pretraining loop, its config and recipes, checkpoints and resume, and the
fault handling (signals, non-finite steps, preflight checks)."""
