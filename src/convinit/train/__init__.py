"""Training: the loop, optimiser/schedule presets, checkpoints and metrics."""

from convinit.train.evaluation import evaluate_run
from convinit.train.model_setup import validate
from convinit.train.trainer import TrainingRun, train

__all__ = ["TrainingRun", "evaluate_run", "train", "validate"]
