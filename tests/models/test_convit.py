"""ConViT and GPSA (docs/method.md §5): local init, fast vs explicit path, timm parity, ablation switches."""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from convinit.errors import ConfigError
from convinit.models import create_model, record_attention
from convinit.models.convit import ConViT, gpsa_layers
from convinit.models.gpsa import GPSA, local_head_offsets, relative_indices
from convinit.models.layers import MHSA
from convinit.models.registry import model_arguments

SMALL = dict(num_classes=5, img_size=16, in_chans=3, patch_size=4, embed_dim=32, num_heads=4, depth=4)


def small_convit(seed: int = 0, **overrides) -> ConViT:
    torch.manual_seed(seed)
    return create_model("convit_tiny_patch4_32", **{**SMALL, "local_up_to_layer": 3, **overrides})


def peak_offsets(positional: torch.Tensor, grid: tuple[int, int], query: tuple[int, int]) -> list[set]:
    """For each head, the set of (dx, dy) offsets where the query's positional attention is maximal."""
    rows, cols = grid
    row, col = query
    out = []
    for head_map in positional[:, row * cols + col]:  # (N,) per head
        top = torch.nonzero(head_map >= head_map.max() * (1 - 1e-5)).flatten().tolist()
        out.append({(key % cols - col, key // cols - row) for key in top})
    return out


def nearest_grid_offsets(dx: float, dy: float) -> set:
    """Integer offsets nearest to (dx, dy): one for odd kernels, 2 or 4 tied ones for even kernels."""
    candidates = [(x, y) for x in range(-3, 4) for y in range(-3, 4)]
    dist = {c: (c[0] - dx) ** 2 + (c[1] - dy) ** 2 for c in candidates}
    best = min(dist.values())
    return {c for c, d in dist.items() if abs(d - best) < 1e-9}


def test_relative_indices_are_key_minus_query_offsets():
    rows, cols = 3, 4
    rel = relative_indices(rows, cols)
    for q in range(rows * cols):
        for key in range(rows * cols):
            dx, dy = key % cols - q % cols, key // cols - q // cols
            assert rel[q, key].tolist() == [dx, dy, dx * dx + dy * dy]


@pytest.mark.parametrize("heads", [4, 9, 16])
def test_local_init_heads_peak_at_their_intended_offsets(heads):
    torch.manual_seed(0)
    layer = GPSA(dim=heads * 4, num_heads=heads, grid=(9, 9))
    with torch.no_grad():
        positional = layer.positional_attention()  # (H, N, N)
    peaks = peak_offsets(positional, (9, 9), query=(4, 4))
    offsets = local_head_offsets(heads)
    assert len(set(offsets)) == heads  # every head has its own tap
    for head, (dx, dy) in enumerate(offsets):
        assert peaks[head] == nearest_grid_offsets(dx, dy)


def test_local_init_layout_matches_official_pos_proj_rows():
    torch.manual_seed(0)
    layer = GPSA(dim=18, num_heads=9, grid=(5, 5), locality_strength=0.5)
    k, c = 3, 1
    for h1 in range(k):
        for h2 in range(k):
            expected = 0.5 * torch.tensor([2.0 * (h2 - c), 2.0 * (h1 - c), -1.0])
            assert torch.equal(layer.pos_proj.weight[h1 + k * h2], expected)
    assert torch.equal(layer.pos_proj.bias, torch.zeros(9))
    assert torch.equal(layer.v.weight, torch.eye(18))
    assert torch.equal(layer.gates(), torch.sigmoid(torch.ones(9)))


def test_stronger_locality_puts_more_mass_on_the_tap():
    masses = []
    for strength in (0.01, 0.1, 1.0):
        layer = GPSA(dim=36, num_heads=9, grid=(7, 7), locality_strength=strength)
        with torch.no_grad():
            masses.append(layer.positional_attention()[:, 24].max(dim=-1).values.mean().item())
    assert masses[0] < masses[1] < masses[2]


def test_gpsa_fast_path_matches_explicit_path():
    torch.manual_seed(0)
    layer = GPSA(dim=32, num_heads=4, grid=(5, 5))
    with torch.no_grad():
        layer.gating_param.copy_(torch.tensor([-3.0, -0.5, 0.5, 3.0]))
        layer.qk.weight.mul_(20)  # sharp content attention, far from uniform
    x = torch.randn(3, 25, 32, requires_grad=True)
    wrt = [x, layer.gating_param, layer.pos_proj.weight, layer.qk.weight, layer.v.weight]
    fast = layer(x)
    fast_grads = torch.autograd.grad(fast.square().sum(), wrt)
    layer.record = True
    explicit = layer(x)
    explicit_grads = torch.autograd.grad(explicit.square().sum(), wrt)
    assert layer.attention_map.shape == (3, 4, 25, 25)
    torch.testing.assert_close(fast, explicit, rtol=1e-5, atol=1e-5)
    for fast_grad, explicit_grad in zip(fast_grads, explicit_grads, strict=True):  # training agrees too
        torch.testing.assert_close(fast_grad, explicit_grad, rtol=1e-4, atol=1e-4)


def test_explicit_attention_rows_are_the_gated_mixture():
    torch.manual_seed(0)
    layer = GPSA(dim=16, num_heads=4, grid=(3, 3))
    x = torch.randn(2, 9, 16)
    with record_attention(layer) as maps:
        layer(x)
    attn = maps[""]
    q, k = layer.qk(x).reshape(2, 9, 2, 4, 4).permute(2, 0, 3, 1, 4)
    content = torch.softmax(q @ k.transpose(-2, -1) * 4**-0.5, dim=-1)
    gate = torch.sigmoid(layer.gating_param).view(1, 4, 1, 1)
    expected = (1 - gate) * content + gate * layer.positional_attention().detach()
    torch.testing.assert_close(attn, expected)
    torch.testing.assert_close(attn.sum(-1), torch.ones(2, 4, 9))  # renormalisation is a no-op


def test_convit_logits_same_with_and_without_recording():
    model = small_convit().eval()
    with torch.no_grad():
        layer = gpsa_layers(model)[1]
        layer.gating_param.copy_(torch.tensor([-2.0, 0.0, 1.0, 2.0]))
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        fast = model(images)
        with record_attention(model) as maps:
            explicit = model(images)
    torch.testing.assert_close(fast, explicit, rtol=1e-5, atol=1e-5)
    shapes = [tuple(m.shape[-2:]) for m in maps.values()]
    assert shapes == [(16, 16)] * 3 + [(17, 17)]  # class token enters before the first MHSA block


def test_timm_convit_state_dict_gives_same_logits():
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    reference = timm.create_model("convit_tiny", pretrained=False).eval()
    with torch.no_grad():  # move the gates and biases off their init so every term is exercised
        for name, param in reference.named_parameters():
            if "gating_param" in name or "pos_proj.bias" in name:
                param.copy_(torch.randn_like(param))
    model = create_model("convit_tiny", num_classes=1000, img_size=224).eval()
    model.load_state_dict(reference.state_dict())
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        expected = reference(images)
        got = model(images)
    assert expected.abs().max() > 0.1
    assert (got - expected).abs().max() < 1e-4


def same_seed_differences(**option) -> tuple[set, set]:
    """(state-dict keys whose values differ, parameters whose requires_grad differs) vs the default model."""
    base, variant = small_convit(), small_convit(**option)
    base_sd, variant_sd = base.state_dict(), variant.state_dict()
    assert base_sd.keys() == variant_sd.keys()
    values = {k for k in base_sd if not torch.equal(base_sd[k], variant_sd[k])}
    grads = dict(base.named_parameters())
    flags = {n for n, p in variant.named_parameters() if p.requires_grad != grads[n].requires_grad}
    return values, flags


def test_freeze_gate_freezes_exactly_the_gates():
    values, flags = same_seed_differences(freeze_gate=True)
    assert values == set()
    assert flags == {f"blocks.{i}.attn.gating_param" for i in range(3)}


def test_freeze_gpsa_freezes_exactly_the_gpsa_layers():
    values, flags = same_seed_differences(freeze_gpsa=True)
    assert values == set()
    expected = {f"blocks.{i}.attn.{p}" for i in range(3) for p in
                ("qk.weight", "v.weight", "proj.weight", "proj.bias", "pos_proj.weight", "pos_proj.bias",
                 "gating_param")}  # fmt: skip
    assert flags == expected


def test_no_local_init_changes_exactly_v_and_pos_proj():
    values, flags = same_seed_differences(use_local_init=False)
    assert flags == set()
    assert values == {f"blocks.{i}.attn.{p}" for i in range(3) for p in ("v.weight", "pos_proj.weight")}


def test_frozen_gates_do_not_move_in_training():
    model = small_convit(freeze_gate=True)
    before = [layer.gating_param.clone() for layer in gpsa_layers(model)]
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    model(torch.randn(4, 3, 16, 16)).sum().backward()
    optimizer.step()
    after = [layer.gating_param for layer in gpsa_layers(model)]
    assert all(torch.equal(b, a) for b, a in zip(before, after, strict=True))
    assert gpsa_layers(model)[0].pos_proj.weight.grad is not None


def test_frozen_gpsa_trains_the_rest_without_error():
    model = small_convit(freeze_gpsa=True)
    model(torch.randn(4, 3, 16, 16)).sum().backward()
    assert all(p.grad is None for layer in gpsa_layers(model) for p in layer.parameters())
    assert model.blocks[3].attn.qkv.weight.grad is not None


def test_rel_indices_are_a_non_persistent_buffer_that_follows_to():
    model = small_convit()
    layer = gpsa_layers(model)[0]
    assert "blocks.0.attn.rel_indices" in dict(model.named_buffers())
    assert "blocks.0.attn.rel_indices" not in model.state_dict()
    model.to(torch.float64)
    assert layer.rel_indices.dtype == torch.float64
    assert model(torch.randn(1, 3, 16, 16, dtype=torch.float64)).dtype == torch.float64
    model.to("meta")
    assert layer.rel_indices.device.type == "meta"


def test_positional_map_follows_pos_proj_and_equals_its_linear_layer():
    layer = GPSA(dim=16, num_heads=4, grid=(4, 4))
    with torch.no_grad():
        first = layer.positional_attention()
        layer.pos_proj.weight.data.mul_(0.5)  # bypasses autograd's version counter
        second = layer.positional_attention()
        expected = torch.softmax(layer.pos_proj(layer.rel_indices).permute(2, 0, 1), dim=-1)
    assert not torch.allclose(first, second)
    torch.testing.assert_close(second, expected)


def test_positional_map_holds_no_subnormal_weights_and_rows_still_sum_to_one():
    """A local map on ConViT-Ti/2's 16x16 grid reaches far below float32's smallest normal number; those
    weights are zero (as flushing would make them), so the positional product is fast without flushing."""
    layer = GPSA(dim=16, num_heads=4, grid=(16, 16))
    with torch.no_grad():
        maps = layer.positional_attention()
        unclipped = torch.softmax(layer.pos_proj(layer.rel_indices).permute(2, 0, 1), dim=-1)
    tiny = torch.finfo(torch.float32).tiny
    assert ((unclipped > 0) & (unclipped < tiny)).any()  # the case exists at this grid
    assert not ((maps > 0) & (maps < tiny)).any()
    torch.testing.assert_close(maps, unclipped, atol=tiny, rtol=0)
    torch.testing.assert_close(maps.sum(-1), torch.ones(4, 256))


def test_positional_map_computed_once_per_forward_while_training():
    model = small_convit()
    calls = mock.Mock(wraps=GPSA.positional_attention)
    with mock.patch.object(GPSA, "positional_attention", lambda self: calls(self)):
        model(torch.randn(8, 3, 16, 16)).sum().backward()
    assert calls.call_count == 3  # one per GPSA layer, not per image
    assert gpsa_layers(model)[0].pos_proj.weight.grad is not None


def test_rectangular_grid_forward_and_offsets():
    model = small_convit(img_size=(16, 32)).eval()
    layer = gpsa_layers(model)[0]
    assert model.grid == (4, 8) and layer.rel_indices.shape == (32, 32, 3)
    images = torch.randn(2, 3, 16, 32)
    with torch.no_grad():
        fast = model(images)
        with record_attention(model):
            explicit = model(images)
        peaks = peak_offsets(layer.positional_attention(), (4, 8), query=(2, 4))
    torch.testing.assert_close(fast, explicit, rtol=1e-5, atol=1e-5)
    assert fast.shape == (2, 5)
    for head, (dx, dy) in enumerate(local_head_offsets(4)):
        assert peaks[head] == nearest_grid_offsets(dx, dy)


def test_non_square_heads_with_local_init_is_a_config_error():
    with pytest.raises(ConfigError, match="square number of heads"):
        small_convit(embed_dim=36, num_heads=6)
    small_convit(embed_dim=36, num_heads=6, use_local_init=False)


def test_partial_local_init_keeps_random_rows_beyond_k_squared():
    torch.manual_seed(0)
    layer = GPSA(dim=30, num_heads=6, grid=(4, 4), partial_local_init=True)
    assert torch.equal(layer.pos_proj.weight[:4, 2], -torch.ones(4))
    assert layer.pos_proj.weight[4:].abs().max() < 0.05  # trunc-normal std 0.02 rows


def test_local_up_to_layer_must_leave_an_mhsa_block():
    with pytest.raises(ConfigError, match="local_up_to_layer"):
        small_convit(local_up_to_layer=4)
    model = small_convit(local_up_to_layer=0)
    assert not gpsa_layers(model) and all(isinstance(b.attn, MHSA) for b in model.blocks)


def test_drop_path_rates_are_linspace_and_only_active_in_training():
    model = small_convit(drop_path_rate=0.3)
    assert [b.drop_path.rate for b in model.blocks] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    images = torch.randn(4, 3, 16, 16)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(images), model(images))


def test_presets_have_the_paper_widths():
    widths = {
        "convit_tiny": (192, 4), "convit_small": (432, 9), "convit_base": (768, 16),
        "convit_tiny_plus": (256, 4), "convit_small_plus": (576, 9), "convit_base_plus": (1024, 16),
        "convit_tiny_patch2_32": (192, 4), "convit_tiny_patch4_32": (192, 4),
    }  # fmt: skip
    for name, (dim, heads) in widths.items():
        args = model_arguments(name)
        assert (args["embed_dim"].default, args["num_heads"].default) == (dim, heads)
        assert (args["depth"].default, args["local_up_to_layer"].default) == (12, 10)
    model = create_model("convit_tiny_patch2_32", num_classes=10, img_size=32)
    assert model.grid == (16, 16) and len(gpsa_layers(model)) == 10


def test_presets_build_on_the_meta_device():
    with torch.device("meta"):  # how the trainer checks model arguments without allocating
        model = create_model("convit_small", num_classes=10, img_size=224, drop_path_rate=0.1)
    assert gpsa_layers(model)[0].rel_indices.is_meta


def test_autocast_forward_and_backward_reach_the_positional_parameters():
    model = small_convit()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(torch.randn(2, 3, 16, 16))
    assert logits.dtype == torch.bfloat16
    logits.float().sum().backward()
    layer = gpsa_layers(model)[0]
    assert layer.pos_proj.weight.grad is not None and layer.gating_param.grad is not None


def test_shipped_convit_presets_and_grid_rows_resolve_and_build():
    from convinit.config import preset_names, resolve_config
    from convinit.experiments.grid import expand

    names = [n for n in preset_names() if n.startswith("convit/")] + ["deit"]
    configs = [resolve_config(name) for name in names]
    grids = ("convit-ablation", "convit-gpsa-layers", "convit-locality-strength", "convit-sample-efficiency")
    configs += [run.config for grid in grids for scale in ("small", "full") for run in expand(grid, scale)]
    assert len(names) >= 5 and len(configs) >= 50
    for cfg in configs:
        with torch.device("meta"):
            create_model(cfg.model, num_classes=10, img_size=cfg.img_size or 8, in_chans=1, **cfg.model_args)
    small = resolve_config("convit/small")
    with torch.device("meta"):  # the DeiT row of the CPU profile takes the same model_args
        deit = create_model("deit_tiny", num_classes=10, img_size=8, in_chans=1, **small.model_args)
    assert deit.grid == (4, 4)


def test_convinit_convit_state_dict_loads_into_timm_with_same_logits():
    timm = pytest.importorskip("timm")
    torch.manual_seed(1)
    model = create_model("convit_tiny", num_classes=10, img_size=224).eval()
    with torch.no_grad():  # trained-looking gates and positional biases
        for block in gpsa_layers(model):
            block.gating_param.copy_(torch.randn_like(block.gating_param))
            block.pos_proj.bias.copy_(torch.randn_like(block.pos_proj.bias))
    reference = timm.create_model("convit_tiny", pretrained=False, num_classes=10).eval()
    reference.load_state_dict(model.state_dict())
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        assert (reference(images) - model(images)).abs().max() < 1e-4
