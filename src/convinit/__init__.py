"""convinit: Vision Transformers with a convolutional inductive bias, for small datasets.

Public API: `create_model`, `list_models`, `initialize`, `from_pretrained`, `save_pretrained`,
`list_datasets`, `load_dataset`, `record_attention`.
"""

import convinit._progress_bars  # noqa: F401  (first: before anything imports tqdm.auto)
from convinit.data import list_datasets, load_dataset
from convinit.errors import ConfigError, ConvinitError, DataError
from convinit.init import initialize
from convinit.models import create_model, list_models, record_attention
from convinit.models.pretrained import from_pretrained, save_pretrained

__version__ = "0.1.0"

from convinit.models import timm_registry  # noqa: E402

timm_registry.install()  # convinit_<name> models in timm's registry once timm is imported

__all__ = [
    "ConfigError",
    "ConvinitError",
    "DataError",
    "__version__",
    "create_model",
    "from_pretrained",
    "initialize",
    "list_datasets",
    "list_models",
    "load_dataset",
    "record_attention",
    "save_pretrained",
]
