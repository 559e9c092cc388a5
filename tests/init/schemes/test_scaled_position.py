"""`scaled-position`, impulse's control: the position table prepared as impulse does, attention random."""

from __future__ import annotations

import pytest
import torch

from convinit.errors import ConfigError
from convinit.init import initialize
from convinit.models import create_model

timm_vit = pytest.importorskip("timm.models.vision_transformer")


def timm_model(seed: int = 0):
    torch.manual_seed(seed)
    return timm_vit.VisionTransformer(
        img_size=16, patch_size=2, in_chans=1, num_classes=3, embed_dim=32, depth=2, num_heads=4
    )


def test_position_table_is_what_impulse_makes_of_it_and_every_other_weight_is_untouched():
    before = timm_model().state_dict()
    control, impulse = timm_model(), timm_model()
    report = initialize(control, "scaled-position")
    initialize(impulse, "impulse", seed=0, kernel_size=3, pseudo_input="LN(P)")
    after = control.state_dict()
    assert torch.equal(after["pos_embed"], impulse.state_dict()["pos_embed"])
    assert torch.allclose(after["pos_embed"], before["pos_embed"] * 18.0)
    assert all(torch.equal(after[k], v) for k, v in before.items() if k != "pos_embed")
    assert "multiplied by 18" in report["position"]["pos_embed"]


def test_sincos_mode_writes_the_same_table_as_impulse_sincos():
    control, impulse = timm_model(), timm_model()
    initialize(control, "scaled-position", learned_pos_embed="sincos")
    initialize(impulse, "impulse", seed=0, kernel_size=3, pseudo_input="LN(P)", learned_pos_embed="sincos")
    assert torch.equal(control.pos_embed, impulse.pos_embed)


def test_models_without_a_learned_position_table_are_refused_unchanged():
    torch.manual_seed(0)
    tiny = dict(num_classes=3, img_size=8, in_chans=1, patch_size=2, dim=32, depth=1, heads=2, dim_head=16)
    model = create_model("simplevit", mlp_dim=32, **tiny)  # a fixed sin-cos P
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ConfigError, match="would be init=random under another name"):
        initialize(model, "scaled-position")
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())


def test_keep_is_refused_because_it_would_change_nothing():
    with pytest.raises(ConfigError, match="must be 'scale' or 'sincos', got 'keep'"):
        initialize(timm_model(), "scaled-position", learned_pos_embed="keep")


def test_with_images_it_reports_the_real_pass_figures_every_scheme_reports():
    images = torch.randn(64, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    report = initialize(timm_model(), "scaled-position", images=images)
    assert {"real_pass", "real_pass_held_out"} <= set(report)
    assert {"mean_entropy", "mean_distance"} <= set(report["real_pass_held_out"])
