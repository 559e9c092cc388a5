"""`model_args` of every family checked against the model's own signature or config before any build.

Each row is a reproduction that crashed with a traceback (KeyError, IndexError, ImportError, a
dataclass validation error) or trained another model than the one asked for (a typo kept as a
transformers config attribute, a ViT with no layers, q/k/v of shape [28, 30]). Each must end in one
ConfigError line naming the key, before anything is built for real or trained.
"""

from __future__ import annotations

import pytest

from convinit.cli import main
from convinit.config import resolve_config
from convinit.errors import ConfigError
from convinit.train.validation import validate

TINY = ["dataset=digits", "epochs=1", "device=cpu"]
TIMM = ["model=timm:vit_tiny_patch16_224", "model_args.patch_size=2"]
HF = ["model=hf:vit", "model_args.patch_size=2"]

REFUSED = {
    "own-num_classes": (["model_args.num_classes=5"], "num_classes is not passed to the model: the data"),
    "own-img_size": (["model_args.img_size=16"], "img_size is not passed to the model: the config key"),
    "own-in_chans": (["model_args.in_chans=3"], "in_chans is not passed to the model: the data"),
    "own-pretrained": (["model_args.pretrained=true"], "pretrained is not passed to the model"),
    "own-text-for-number": (["model_args.dim=abc"], "model_args.dim='abc' is not a number"),
    "own-typo": (["model_args.dimm=3"], "takes no argument dimm; did you mean 'dim'"),
    "own-negative": (["model_args.depth=-1"], "model_args.depth=-1 is negative"),
    "timm-num_classes": ([*TIMM, "model_args.num_classes=5"], "num_classes is not passed to the model"),
    "timm-img_size": ([*TIMM, "model_args.img_size=16"], "img_size is not passed to the model"),
    "timm-in_chans": ([*TIMM, "model_args.in_chans=3"], "in_chans is not passed to the model"),
    "timm-pretrained": ([*TIMM, "model_args.pretrained=true"], "pretrained is not passed to the model"),
    "timm-checkpoint": ([*TIMM, "model_args.checkpoint_path=/etc/passwd"], "checkpoint_path is not passed"),
    "timm-act_layer": ([*TIMM, "model_args.act_layer=bogus"], "with model_args.act_layer='bogus': KeyError"),
    "timm-embed_dim-text": ([*TIMM, "model_args.embed_dim=abc"], "embed_dim='abc' is not a number"),
    "timm-typo": ([*TIMM, "model_args.embed_dimm=32"], "no argument embed_dimm; did you mean 'embed_dim'"),
    "hf-image_size": ([*HF, "model_args.image_size=16"], "image_size is not passed to the model: the config"),
    "hf-num_labels": ([*HF, "model_args.num_labels=5"], "num_labels is not passed to the model: the dataset"),
    "hf-num_channels": ([*HF, "model_args.num_channels=3"], "num_channels is not passed to the model"),
    "hf-hidden_act": ([*HF, "model_args.hidden_act=bogus"], "hidden_act='bogus' is not an activation"),
    "hf-flash-attention": (
        [*HF, "model_args.attn_implementation=flash_attention_2"],
        "with model_args.attn_implementation='flash_attention_2': ",
    ),
    "hf-text-for-number": ([*HF, "model_args.hidden_size=abc"], "hidden_size='abc' is not a number"),
    "hf-typo": ([*HF, "model_args.hidden_sizee=32"], "no argument hidden_sizee; did you mean 'hidden_size'"),
    "hf-no-layers": ([*HF, "model_args.num_hidden_layers=-1"], "num_hidden_layers=-1 is negative"),
    "hf-zero-layers": ([*HF, "model_args.num_hidden_layers=0"], "num_hidden_layers=0 must be a positive"),
    "hf-heads-do-not-divide": (
        [*HF, "model_args.hidden_size=30", "model_args.num_attention_heads=4"],
        "hidden_size=30 is not divisible by model_args.num_attention_heads=4",
    ),
    "hf-patch-larger-than-image": (["model=hf:vit"], "patch_size=16 is larger than the (8, 8) image"),
    "hf-list-hidden_size": (
        [*HF, "model_args.hidden_size=[32,32]"],
        "hidden_size=[32, 32] must be an integer",
    ),
    "hf-list-heads": (
        [*HF, "model_args.num_attention_heads=[2]"],
        "num_attention_heads=[2] must be an integer",
    ),
    "hf-list-dropout": (
        [*HF, "model_args.hidden_dropout_prob=[0.1]"],
        "hidden_dropout_prob=[0.1] must be a number",
    ),
}


@pytest.mark.parametrize("overrides, message", REFUSED.values(), ids=REFUSED.keys())
def test_model_argument_is_refused_in_one_line_naming_it(overrides, message):
    if any(o.startswith("model=timm:") for o in overrides):
        pytest.importorskip("timm")
    if any(o.startswith("model=hf:") for o in overrides):
        pytest.importorskip("transformers")
        if "flash_attention_2" in str(overrides) and flash_attention_installed():
            pytest.skip("flash-attn is installed here")
    with pytest.raises(ConfigError) as info:
        validate(resolve_config(None, [*TINY, *overrides]))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def flash_attention_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is not None


@pytest.mark.parametrize(
    "overrides",
    [
        [*TIMM, "model_args.embed_dim=32", "model_args.depth=1", "model_args.num_heads=2"],
        [
            *HF,
            "model_args.hidden_size=32",
            "model_args.num_attention_heads=2",
            "model_args.intermediate_size=32",
            "model_args.num_hidden_layers=1",
            "model_args.attn_implementation=eager",
        ],
        ["model_args.depth=1", "model_args.dim=32", "model_args.attn_scale=0.5"],
    ],
    ids=["timm", "hf", "convinit"],
)
def test_model_arguments_each_family_takes_are_accepted(overrides):
    family = {"model=timm:vit_tiny_patch16_224": "timm", "model=hf:vit": "transformers"}.get(overrides[0])
    if family:
        pytest.importorskip(family)
    plan = validate(resolve_config(None, [*TINY, *overrides]))
    assert plan.model.model_args == resolve_config(None, [*TINY, *overrides]).model_args


def test_transformers_typo_trains_nothing(tmp_path, capsys):
    pytest.importorskip("transformers")
    out = tmp_path / "run"
    code = main(["train", *TINY, *HF, "model_args.hidden_sizee=32", "--out", str(out)])
    assert code == 2
    assert "takes no argument hidden_sizee" in capsys.readouterr().err
    assert not (out / "metrics.jsonl").exists()


def test_constructor_failure_is_blamed_on_the_key_that_causes_it():
    from convinit.models.arguments import culprits

    def construct(args):
        if args.get("depth", 1) < 0:
            raise KeyError("depth")

    assert culprits(construct, {"dim": 3, "depth": -1}) == ["depth"]
    assert culprits(lambda args: 1 / 0, {"dim": 3, "depth": 1}) == ["dim", "depth"]
