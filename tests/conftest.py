"""Fixtures shared across test areas. Keep this small: put area-specific helpers in the test files."""

import pytest


@pytest.fixture
def tiny_overrides() -> list[str]:
    """Config overrides for a seconds-long run on digits: 2 epochs of 10 steps, a 2-layer ViT on the CPU.

    NOTE (data helper): reconstructed after this file was overwritten by mistake; check it.
    """
    return [
        "epochs=2",
        "batch_size=100",
        "model_args.depth=2",
        "model_args.dim=32",
        "model_args.heads=2",
        "model_args.dim_head=16",
        "model_args.mlp_dim=64",
        "warmup_epochs=0",
        "device=cpu",
    ]


@pytest.fixture(scope="session")
def digits():
    """The embedded 8x8 digits dataset (1000 train / 797 test), loaded once per test session."""
    from convinit.data import load_dataset

    return load_dataset("digits")
