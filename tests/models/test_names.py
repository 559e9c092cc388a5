"""The table `convinit models` prints without importing torch is the registry's list of shipped presets."""

from __future__ import annotations

import importlib

from convinit.models.names import MODEL_NAMES
from convinit.models.registry import FAMILIES, list_models, model_entrypoint


def test_model_name_table_equals_the_shipped_registry():
    shipped_modules = {f"convinit.models.{family}" for family in FAMILIES}
    shipped = sorted(n for n in list_models() if model_entrypoint(n).__module__ in shipped_modules)
    assert list(MODEL_NAMES) == shipped, "add the new preset's name to convinit/models/names.py"


def test_public_api_names_resolve_lazily():
    convinit = importlib.import_module("convinit")
    for name in convinit.__all__:
        assert getattr(convinit, name) is not None


def test_subpackages_are_reachable_as_attributes_after_import_convinit():
    convinit = importlib.import_module("convinit")
    assert convinit.data.load_dataset is not None and convinit.models.create_model is not None
