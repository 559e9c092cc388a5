"""Training: the loop, optimiser/schedule presets, checkpoints and metrics."""

from convinit.train.evaluation import evaluate_run
from convinit.train.trainer import TrainingRun, train
from convinit.train.validation import validate

__all__ = ["TrainingRun", "evaluate_run", "train", "validate"]
