"""Presets name whose augmentation definitions they mean; a magnitude off that scale is refused."""

from __future__ import annotations

import pytest
import torch

from convinit.config import resolve_config
from convinit.data.augmentation.batch_augment import BatchAugment
from convinit.errors import ConfigError


def test_deit_preset_is_deits_pipeline_on_timms_scale():
    cfg = resolve_config("deit", ["data_dir=."])
    assert (cfg.randaugment_policy, cfg.randaugment_n, cfg.randaugment_m, cfg.randaugment_mstd) == (
        "timm",
        2,
        9,
        0.5,
    )
    assert (cfg.resized_crop_scale, cfg.random_erasing) == (0.08, 0.25)


def test_paper1_augmented_recipe_is_the_official_scripts_resized_crop_flip_and_randaugment_2_14():
    cfg = resolve_config("paper1/recipe_aug", [])
    assert (cfg.randaugment_policy, cfg.randaugment_n, cfg.randaugment_m) == ("torchvision", 2, 14)
    assert (cfg.resized_crop_scale, cfg.crop_padding, cfg.hflip) == (0.08, 0, True)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["randaugment_n=2", "randaugment_m=14"], "on timm's scale"),
        (["randaugment_n=2", "randaugment_policy=torchvision", "randaugment_m=9.5"], "integer bin in"),
        (["randaugment_n=2", "randaugment_policy=torchvision", "randaugment_mstd=0.5"], "has none"),
        (["randaugment_policy=kornia"], "randaugment_policy"),
        (["resized_crop_scale=0"], "resized_crop_scale"),
    ],
)
def test_a_magnitude_off_the_policys_scale_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        resolve_config("default", overrides)


def test_random_resized_crop_gives_the_output_size_and_a_different_crop_per_sample():
    torch.manual_seed(0)
    image = torch.randint(0, 256, (1, 3, 40, 56), dtype=torch.uint8).expand(8, 3, 40, 56)
    out = BatchAugment((0.5,) * 3, (0.25,) * 3, out_size=(24, 24), train=True, resized_crop_scale=0.08)(image)
    assert out.shape == (8, 3, 24, 24)
    assert len({tuple(o.flatten()[:10].tolist()) for o in out}) == 8
