"""Training: the loop, optimiser/schedule presets, checkpoints and metrics."""

from convinit.train.trainer import TrainingRun, evaluate_run, train, validate

__all__ = ["TrainingRun", "evaluate_run", "train", "validate"]
