"""Real data end to end: a small ViT trained on a Fashion-MNIST subset on the CPU."""

from __future__ import annotations

from convinit.config import resolve_config
from convinit.train import train
from tests.conftest import requires_fashion_mnist


@requires_fashion_mnist
def test_small_vit_learns_fashion_mnist_subset_well_above_chance(tmp_path):
    # 1,000 training images (100 per class), the full 10,000-image test set, 5 epochs.
    # Chance is 10 %; a linear classifier on these pixels gets ~70 % with this little data. A 2-layer ViT
    # reaches ~55-65 % here. 45 % is far above anything a broken pipeline (shuffled labels, wrong
    # channel/pixel order, no learning) can reach, yet leaves margin for seeds and thread counts.
    cfg = resolve_config(
        None,
        [
            "dataset=fashion-mnist",
            "per_class=100",
            "epochs=5",
            "batch_size=50",
            "lr=2e-3",
            "warmup_epochs=0.5",
            "model_args.patch_size=4",
            "model_args.dim=64",
            "model_args.depth=2",
            "eval_every=0",
            "eval_batch_size=2000",
        ],
    )
    run = train(cfg, run_dir=tmp_path / "run", progress=False)
    assert run.metrics[-1]["test_acc"] > 45.0
