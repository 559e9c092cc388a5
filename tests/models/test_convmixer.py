"""ConvMixer with fixed spatial filter modes (docs/method.md §1)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from convinit.errors import ConfigError
from convinit.models import create_model, list_models
from convinit.models.convmixer import TokenMixing

SMALL = dict(num_classes=5, img_size=8, in_chans=1, dim=12, depth=2, kernel_size=3, patch_size=2)
MODES = ["learned", "random", "impulse", "box-2", "ones", "gaussian-0.5", "softmax", "perm", "fullperm"]


def small(spatial: str, **kwargs) -> nn.Module:
    torch.manual_seed(0)
    return create_model("convmixer", spatial=spatial, **{**SMALL, **kwargs})


def test_convmixer_is_registered_with_paper_configuration():
    assert "convmixer" in list_models()
    model = create_model("convmixer")
    assert len(model.blocks) == 6 and model.grid == (16, 16)
    conv = model.spatial_layers()[0]
    assert conv.weight.shape == (512, 1, 5, 5) and conv.groups == 512


@pytest.mark.parametrize("spatial", MODES)
def test_every_spatial_mode_runs_and_only_learned_trains_its_filters(spatial):
    model = small(spatial)
    out = model(torch.randn(3, 1, 8, 8))
    assert out.shape == (3, 5) and torch.isfinite(out).all()
    out.sum().backward()
    for layer in model.spatial_layers():
        weights = [layer.weight] if isinstance(layer, nn.Conv2d) else []
        assert all(w.requires_grad == (spatial == "learned") for w in weights)
        assert layer.bias.requires_grad  # the per-channel bias is channel mixing: it always trains


def test_impulse_filters_are_single_taps_scaled_by_sqrt_one_over_k():
    for layer in small("impulse").spatial_layers():
        weights = layer.weight[:, 0]  # (C, k, k)
        assert (weights.flatten(1).count_nonzero(dim=1) == 1).all()
        assert torch.allclose(weights.flatten(1).sum(1), torch.full((12,), math.sqrt(1 / 3)))


def test_box_and_gaussian_filters_have_squared_norm_one_over_k():
    for spatial in ("box-4", "ones", "gaussian-2"):
        weights = small(spatial).spatial_layers()[0].weight[:, 0]
        assert torch.allclose(weights.pow(2).sum((1, 2)), torch.full((12,), 1 / 3))
    assert (small("box-4").spatial_layers()[0].weight.flatten(1).count_nonzero(dim=1) == 4).all()


def test_filter_heads_limit_the_number_of_distinct_filters():
    weights = small("impulse", filter_heads=3).spatial_layers()[0].weight[:, 0]
    for channel in range(12):
        assert torch.equal(weights[channel], weights[channel % 3])


def test_share_filters_across_layers_reuses_one_bank():
    shared = small("impulse", share_filters_across_layers=True).spatial_layers()
    assert torch.equal(shared[0].weight, shared[1].weight)
    fresh = small("impulse").spatial_layers()
    assert not torch.equal(fresh[0].weight, fresh[1].weight)


@pytest.mark.parametrize("spatial", ["perm", "fullperm"])
def test_token_mixing_equals_the_explicit_matrix_per_channel(spatial):
    layer = small(spatial, filter_heads=5).spatial_layers()[0]
    assert isinstance(layer, TokenMixing)
    with torch.no_grad():
        layer.bias.normal_()
    x = torch.randn(2, 12, 4, 4)
    matrices = layer.matrices()  # (heads, N, N)
    assert (matrices.sum(-1) == 1).all()  # each row picks one column
    if spatial == "fullperm":
        assert (matrices.sum(-2) == 1).all()  # ... and each column is picked once: a permutation
    per_channel = matrices[torch.arange(12) % 5]  # (C, N, N): channel c uses matrix c mod heads
    expected = torch.einsum("cnm,bcm->bcn", per_channel, x.flatten(2)) * math.sqrt(1 / 3)
    expected = expected + layer.bias[None, :, None]
    assert torch.allclose(layer(x).flatten(2), expected, atol=1e-6)


@pytest.mark.parametrize("spatial", ["conv", "box-0", "box-10", "gaussian-0", "gaussian-x", "impulse-3"])
def test_invalid_spatial_modes_are_config_errors(spatial):
    with pytest.raises(ConfigError, match="spatial") as info:
        small(spatial)
    assert "\n" not in str(info.value)


def test_bad_kernel_and_heads_are_config_errors():
    with pytest.raises(ConfigError, match="kernel_size"):
        small("impulse", kernel_size=4)
    with pytest.raises(ConfigError, match="filter_heads"):
        small("impulse", filter_heads=0)


def residual_branch(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What the first block adds to x in its spatial step: block output before channel mixing minus x."""
    return model.blocks[0][0](x) - x


@pytest.mark.parametrize("spatial", ["impulse", "learned", "softmax"])
def test_paper1_conv_block_adds_bn_of_the_depthwise_conv_with_no_gelu(spatial):
    model = small(spatial, block="paper1").eval()
    conv, bn = model.spatial_layers()[0], model.blocks[0][0].fn[2]
    x = torch.randn(2, 12, 4, 4)
    with torch.no_grad():
        assert torch.allclose(residual_branch(model, x), bn(conv(x)), atol=1e-6)
        standard = small(spatial).eval()
        conv, bn = standard.spatial_layers()[0], standard.blocks[0][0].fn[2]
        assert torch.allclose(residual_branch(standard, x), bn(nn.functional.gelu(conv(x))), atol=1e-6)


def test_paper1_linear_format_keeps_the_gelu():
    model = small("perm", block="paper1").eval()
    layer, bn = model.spatial_layers()[0], model.blocks[0][0].fn[2]
    x = torch.randn(2, 12, 4, 4)
    with torch.no_grad():
        assert torch.allclose(residual_branch(model, x), bn(nn.functional.gelu(layer(x))), atol=1e-6)


@pytest.mark.parametrize("spatial", ["random", "impulse", "box-2", "gaussian-0.5", "softmax", "perm"])
def test_paper1_fixed_modes_freeze_weight_and_bias_and_standard_freezes_the_weight_only(spatial):
    for layer in small(spatial, block="paper1").spatial_layers():
        assert not any(p.requires_grad for p in layer.parameters())
    for layer in small(spatial).spatial_layers():
        assert [n for n, p in layer.named_parameters() if p.requires_grad] == ["bias"]


def test_paper1_scales_hard_code_three_whatever_the_kernel():
    k5 = dict(kernel_size=5, block="paper1")
    impulse = small("impulse", **k5).spatial_layers()[0].weight.flatten(1)  # (C, 25)
    assert torch.allclose(impulse.sum(1), torch.full((12,), math.sqrt(1 / 3)))
    box = small("box-4", **k5).spatial_layers()[0].weight.flatten(1)
    assert torch.allclose(box[box != 0], torch.tensor(math.sqrt(1 / (3 * 4))))
    gaussian = small("gaussian-2", **k5).spatial_layers()[0].weight.flatten(1)
    assert float(gaussian.pow(2).sum(1).mean()) == pytest.approx(1 / 3, rel=1e-5)
    assert small("perm", **k5).spatial_layers()[0].scale == pytest.approx(math.sqrt(1 / 3))
    assert small("perm", kernel_size=5).spatial_layers()[0].scale == pytest.approx(math.sqrt(1 / 5))


def test_softmax_mode_convolves_with_the_softmax_of_its_weights_over_the_taps():
    layer = small("softmax", kernel_size=5).spatial_layers()[0]
    x = torch.randn(2, 12, 4, 4)
    filters = layer.weight.flatten(1).softmax(-1).reshape(12, 1, 5, 5)
    expected = nn.functional.conv2d(x, filters, layer.bias, padding=2, groups=12)
    assert torch.allclose(layer(x), expected, atol=1e-6)
    assert (filters > 0).all() and torch.allclose(filters.sum((1, 2, 3)), torch.ones(12))


def test_unknown_block_is_a_config_error():
    with pytest.raises(ConfigError, match="block must be one of standard, paper1"):
        small("impulse", block="official")


def test_token_mixing_bias_starts_uniform_within_one_over_channels_as_the_official_code():
    torch.manual_seed(0)
    bias = TokenMixing(400, (4, 4), 8, full=False, scale=1.0).bias
    assert bias.abs().max() <= 1 / 400 and bias.std() > 1 / 400 / 3  # U(+-1/C): sd (1/C)/sqrt(3)


def test_paper1_grids_assign_filters_to_channels_at_random_with_replacement():
    from convinit.experiments.grid import expand

    for grid in ("paper1-fig4", "paper1-table6"):
        for scale in ("small", "full"):
            assert {run.config.model_args["filter_assignment"] for run in expand(grid, scale)} == {"random"}
    torch.manual_seed(0)
    layer = small("impulse", filter_heads=3, filter_assignment="random").spatial_layers()[0]
    filters = layer.weight.flatten(1)  # (C, k*k): 12 channels drawn from 3 distinct filters
    assert len({tuple(f.tolist()) for f in filters}) <= 3


def test_learned_filter_heads_equal_a_depthwise_conv_whose_weights_are_the_expanded_bank():
    layer = small("learned", filter_heads=3).spatial_layers()[0]
    assert layer.filters.shape == (3, 1, 3, 3)
    reference = nn.Conv2d(12, 12, 3, groups=12, padding=1)
    with torch.no_grad():
        reference.weight.copy_(layer.filters[torch.arange(12) % 3])  # balanced: channel c uses filter c mod 3
        reference.bias.copy_(layer.bias)
    x = torch.randn(2, 12, 4, 4)
    assert torch.allclose(layer(x), reference(x), atol=1e-6)


def test_learned_filter_heads_gradients_flow_into_the_heads_filters_only():
    layer = small("learned", filter_heads=3).spatial_layers()[0]
    assert [name for name, _ in layer.named_parameters()] == ["filters", "bias"]
    reference = nn.Conv2d(12, 12, 3, groups=12, padding=1)
    with torch.no_grad():
        reference.weight.copy_(layer.weight)
        reference.bias.copy_(layer.bias)
    x = torch.randn(2, 12, 4, 4)
    layer(x).square().sum().backward()
    reference(x).square().sum().backward()
    per_channel = reference.weight.grad  # (C, 1, k, k): a filter's gradient sums its channels'
    expected = torch.stack([per_channel[head::3].sum(0) for head in range(3)])
    assert torch.allclose(layer.filters.grad, expected, atol=1e-5)
    assert torch.allclose(layer.bias.grad, reference.bias.grad, atol=1e-5)


def test_learned_filter_heads_follow_the_fixed_modes_assignment_rules():
    balanced = small("learned", filter_heads=5).spatial_layers()[0]
    assert torch.equal(balanced.head_of_channel, torch.arange(12) % 5)
    drawn = small("learned", filter_heads=3, filter_assignment="random").spatial_layers()[0]
    assert drawn.weight.shape == (12, 1, 3, 3) and set(drawn.head_of_channel.tolist()) <= {0, 1, 2}
    for channel, head in enumerate(drawn.head_of_channel.tolist()):
        assert torch.equal(drawn.weight[channel], drawn.filters[head])


def test_learned_filter_heads_at_the_width_is_the_ordinary_learned_conv():
    plain, full = small("learned"), small("learned", filter_heads=12)
    assert isinstance(full.spatial_layers()[0], nn.Conv2d)
    assert plain.state_dict().keys() == full.state_dict().keys()
    assert all(torch.equal(plain.state_dict()[k], full.state_dict()[k]) for k in plain.state_dict())


def test_learned_filter_heads_count_heads_times_taps_spatial_weights_per_layer():
    def count(model: nn.Module) -> int:
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    per_layer_saved = 12 * 9 - 3 * 9  # (C - heads) * k * k fewer spatial weights in each of the 2 layers
    assert count(small("learned")) - count(small("learned", filter_heads=3)) == 2 * per_layer_saved


def test_learned_filter_heads_start_shared_across_layers_and_run_channels_last():
    model = small("learned", filter_heads=3, share_filters_across_layers=True)
    first, second = model.spatial_layers()
    assert torch.equal(first.filters, second.filters) and first.filters is not second.filters
    x = torch.randn(2, 1, 8, 8)
    assert torch.allclose(model(x), model.to(memory_format=torch.channels_last)(x), atol=1e-5)


def test_a_grid_row_sets_filter_heads_on_the_users_convmixer():
    from convinit.config.train_config import resolve_config

    cfg = resolve_config("own_models/convmixer_small", ["model_args.filter_heads=4"])
    model = create_model(cfg.model, num_classes=10, img_size=28, in_chans=1, **cfg.model_args)
    assert all(layer.filters.shape == (4, 1, 5, 5) for layer in model.spatial_layers())
