"""Training: the plan, the run built from it, the loop, optimiser and schedule, checkpoints, metrics."""

from convinit.train.trainer import TrainResult, evaluate_run, train
from convinit.train.validation import decided_config, validate

TrainingRun = TrainResult  # the result's earlier name, kept importable

__all__ = ["TrainResult", "decided_config", "evaluate_run", "train", "validate"]
