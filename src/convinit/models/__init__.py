"""Model registry and architectures; importing this package registers every preset."""

from convinit.models import convit, convmixer, deit, vit  # noqa: F401  (importing registers their presets)
from convinit.models.layers import record_attention
from convinit.models.registry import create_model, list_models, register_model

__all__ = ["create_model", "list_models", "record_attention", "register_model"]
