"""convinit: Vision Transformers with a convolutional inductive bias, for small datasets.

Public API: `create_model`, `list_models`, `initialize`, `convert`, `recommend`, `from_pretrained`,
`save_pretrained`, `list_datasets`, `load_dataset`, `record_attention`, `vit_or_cnn`. Each is imported on
first use, so that `import convinit` (and `convinit --help`, `models`, `configs`, `datasets`) does not
import torch.
"""

from __future__ import annotations

import warnings

# Progress bars in Jupyter without ipywidgets: tqdm.auto (the trainer's, and the Hub libraries') falls
# back to its text bar, which works, with a warning ("IProgress not found") that reads like an error to a
# newcomer. Set first, before anything imports tqdm.auto; `pip install ipywidgets` gets widget bars.
warnings.filterwarnings("ignore", message="IProgress not found")

from convinit.errors import ConfigError, ConvinitError, DataError  # noqa: E402
from convinit.naming.lazy_exports import lazy_exports  # noqa: E402
from convinit.share import timm_registry  # noqa: E402
from convinit.system.version import VERSION  # noqa: E402

__version__ = VERSION

_EXPORTS = {
    "create_model": "convinit.models.registry",
    "list_models": "convinit.models.registry",
    "record_attention": "convinit.models.layers",
    "initialize": "convinit.init",
    "convert": "convinit.models.convert",
    "recommend": "convinit.train.recommendation",
    "from_pretrained": "convinit.models.pretrained",
    "save_pretrained": "convinit.models.pretrained",
    "list_datasets": "convinit.data.datasets",
    "load_dataset": "convinit.data.datasets",
    "vit_or_cnn": "convinit.experiments.vit_or_cnn",
}

timm_registry.install()  # convinit_<name> models in timm's registry once timm is imported

__all__ = ["ConfigError", "ConvinitError", "DataError", "__version__", *sorted(_EXPORTS)]


__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
