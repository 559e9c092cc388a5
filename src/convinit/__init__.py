"""convinit: Vision Transformers with a convolutional inductive bias, for small datasets.

Public API: `create_model`, `list_models`, `initialize`, `list_datasets`, `load_dataset`.
"""

from convinit.data import list_datasets, load_dataset
from convinit.errors import ConfigError, ConvinitError, DataError
from convinit.init import initialize
from convinit.models import create_model, list_models, record_attention

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConvinitError",
    "DataError",
    "__version__",
    "create_model",
    "initialize",
    "list_datasets",
    "list_models",
    "load_dataset",
    "record_attention",
]
