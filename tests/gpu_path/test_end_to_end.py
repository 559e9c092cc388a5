"""`convinit train` on a fabricated image folder in stream mode, on the pretend GPU, end to end: data
chosen and built, model built, initialised on real images and moved, the epoch loop, evaluation, the
metrics log. Every training step after the first is audited: no blocking copy, no read, no mismatch.

What fake tensors cannot do is replaced, and only that: checkpoints (they serialise values, which fake
tensors lack) and the augmentation preview PNG (it renders values) are not written, and
`torch.cuda.synchronize` at the epoch end is a no-op, and the non-finite policy is not applied (the
totals it reads are stand-ins, see fake_cuda). DataLoader workers are 0: a forked worker would
inherit the fake mode. `data_budget_gb` is set so that no free-memory query reaches the missing GPU.
"""

from __future__ import annotations

from unittest import mock

from convinit.config import resolve_config
from convinit.speed.fake_cuda import CUDA, DeviceAudit, describe, fake_cuda
from convinit.speed.stream import fabricate_folder
from convinit.train import trainer


def test_convinit_train_on_a_streamed_folder_steps_without_waiting_on_the_fake_gpu(tmp_path):
    folder = fabricate_folder(tmp_path / "images", classes=2, per_class=4, val_per_class=2)
    data = [f"data_dir={folder}", "data_mode=stream", "data_budget_gb=1", "workers=0", "repeated_aug=1"]
    model = ["model=deit_tiny", "img_size=32", "model_args.depth=1", "ema_decay=0.99"]
    run = ["batch_size=4", "epochs=2", "warmup_epochs=0", "device=cpu"]
    cfg = resolve_config("deit", [*data, *model, *run])
    steps: list[DeviceAudit] = []

    def audited_step(*args):
        with DeviceAudit() as recorder:
            trainer_step(*args)
        steps.append(recorder)

    trainer_step = trainer.train_step
    with (
        mock.patch("convinit.train.plan.resolve_device", lambda name: CUDA),
        mock.patch.object(trainer, "train_step", audited_step),
        mock.patch.object(trainer, "save_checkpoint", lambda *args, **kwargs: None),
        mock.patch.object(trainer, "check_nonfinite", lambda run, totals: totals),
        mock.patch("convinit.train.run_builder.save_augmentation_preview", lambda *args: None),
        mock.patch("torch.cuda.synchronize", lambda *args: None),
        fake_cuda(),
    ):
        run = trainer.train(cfg, tmp_path / "run", progress=False)
    assert len(steps) == 2 * 2 and run.metrics[-1]["epoch"] == 2  # 8 images, batches of 4, 2 epochs
    assert all(p.device == CUDA for p in run.model.parameters())
    waits = [t for recorder in steps[1:] for t in recorder.blocking]
    assert waits == [], describe(waits)
