"""Training: the loop, optimiser/schedule presets, checkpoints and metrics."""

from convinit.train.evaluation import evaluate_run
from convinit.train.trainer import TrainingRun, train
from convinit.train.validation import decided_config, validate

__all__ = ["TrainingRun", "decided_config", "evaluate_run", "train", "validate"]
