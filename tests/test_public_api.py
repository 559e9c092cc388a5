"""`import convinit` exposes its public API lazily: every name resolves, and subpackages are attributes."""

from __future__ import annotations

import importlib


def test_public_api_names_resolve_lazily():
    convinit = importlib.import_module("convinit")
    for name in convinit.__all__:
        assert getattr(convinit, name) is not None


def test_subpackages_are_reachable_as_attributes_after_import_convinit():
    convinit = importlib.import_module("convinit")
    assert convinit.data.load_dataset is not None and convinit.models.create_model is not None


def test_recommend_is_public_and_names_the_recipe_for_a_users_vit():
    convinit = importlib.import_module("convinit")
    assert "recommend" in convinit.__all__
    assert convinit.recommend("timm:vit_tiny_patch16_224").command_line.startswith("convert=blend")
