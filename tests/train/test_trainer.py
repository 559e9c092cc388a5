"""The training loop: outputs, learning, resume, checkpoints, evaluation."""

from __future__ import annotations

import json
import signal

import pytest
import torch
from safetensors.torch import load_file

from convinit.config import resolve_config
from convinit.data import MixupCutmix
from convinit.errors import ConfigError, TrainingDiverged
from convinit.runs.checkpoint import list_checkpoints
from convinit.runs.signals import RunInterrupted
from convinit.train import evaluate_run, train

VOLATILE = {"seconds", "images_per_s"}


def stable(rows):
    return [{k: v for k, v in row.items() if k not in VOLATILE} for row in rows]


def test_run_writes_config_metrics_and_checkpoints(tmp_path, tiny_overrides):
    run = train(resolve_config(None, tiny_overrides), run_dir=tmp_path / "run", progress=False)
    files = {p.name for p in run.run_dir.iterdir()}
    assert {"config.yaml", "metrics.jsonl", "metrics.csv", "init_report.json", "finished.json"} <= files
    rows = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    assert {"train_loss", "train_acc", "test_acc", "lr", "images_per_s"} <= set(rows[-1])
    assert (run.run_dir / "metrics.csv").read_text().splitlines()[0].startswith("epoch,")
    checkpoints = list_checkpoints(run.run_dir)
    assert [c.name for c in checkpoints] == ["epoch-0001", "epoch-0002"]  # the last two are kept
    weights = load_file(checkpoints[-1] / "model.safetensors")
    assert torch.equal(weights["head.weight"], run.model.state_dict()["head.weight"])


def test_small_vit_learns_digits_well_above_chance(tmp_path, tiny_overrides):
    # Chance is 10 %; this 2-layer ViT reaches ~70 % in 8 epochs (docs/method.md §7 measures 45-60 % for
    # 20 epochs of a random-init ViT). 40 % fails any broken image/label pipeline with room for seeds.
    cfg = resolve_config(None, tiny_overrides + ["epochs=8", "lr=3e-3", "batch_size=50"])
    run = train(cfg, run_dir=tmp_path / "run", progress=False)
    assert run.metrics[-1]["test_acc"] > 40.0


def test_interrupted_run_resumes_to_the_same_weights_and_metrics(tmp_path, tiny_overrides, monkeypatch):
    overrides = tiny_overrides + [
        "epochs=3",
        "deterministic=true",
        "hflip=true",
        "crop_padding=1",
        "mixup=0.2",
    ]
    reference = train(resolve_config(None, overrides), run_dir=tmp_path / "reference", progress=False)
    resumed = interrupted_then_resumed(resolve_config(None, overrides), tmp_path / "resumed", monkeypatch)
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name
    assert stable(resumed.metrics) == stable(reference.metrics)


def interrupted_then_resumed(cfg, run_dir, monkeypatch):
    """`cfg` (10 steps per epoch) trained into `run_dir`, stopped by Ctrl-C at step 5 of epoch 2, resumed."""
    calls = {"n": 0}
    original = MixupCutmix.__call__

    def ctrl_c_during_step_five_of_epoch_two(self, images, labels):
        calls["n"] += 1
        if calls["n"] == 10 + 5:
            signal.raise_signal(signal.SIGINT)
        return original(self, images, labels)

    monkeypatch.setattr(MixupCutmix, "__call__", ctrl_c_during_step_five_of_epoch_two)
    with pytest.raises(RunInterrupted):
        train(cfg, run_dir=run_dir, progress=False)
    assert [c.name for c in list_checkpoints(run_dir)] == ["epoch-0001", "epoch-0001-step-000005"]
    monkeypatch.setattr(MixupCutmix, "__call__", original)
    return train(run_dir=run_dir, resume=True, progress=False)


def test_a_resumed_run_continues_the_content_warmup_and_keeps_the_content_projectors(
    tmp_path, tiny_overrides, monkeypatch
):
    blend = ["model_args.qk_input=blend", "model_args.alpha=0.5", "model_args.content_warmup=15",
             "model_args.content_projection=true", "init=impulse", "deterministic=true"]  # fmt: skip
    cfg = resolve_config(None, tiny_overrides + blend)  # 20 steps: the warm-up ends in epoch 2
    reference = train(cfg, run_dir=tmp_path / "reference", progress=False)
    assert float(reference.model.content_steps) == 20.0
    resumed = interrupted_then_resumed(cfg, tmp_path / "resumed", monkeypatch)
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name
    assert stable(resumed.metrics) == stable(reference.metrics)


def test_damaged_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, tiny_overrides):
    run = train(resolve_config(None, tiny_overrides), run_dir=tmp_path / "run", progress=False)
    newest = list_checkpoints(run.run_dir)[-1]
    with open(newest / "model.safetensors", "r+b") as f:
        f.truncate(100)
    with pytest.warns(UserWarning, match="epoch-0002 is damaged"):
        result = evaluate_run(run.run_dir)
    assert result["checkpoint"].endswith("epoch-0001")


def test_finished_run_directory_is_not_overwritten_by_accident(tmp_path, tiny_overrides):
    cfg = resolve_config(None, tiny_overrides + ["epochs=1"])
    train(cfg, run_dir=tmp_path / "run", progress=False)
    with pytest.raises(ConfigError, match="already holds a finished run"):
        train(cfg, run_dir=tmp_path / "run", progress=False)
    train(cfg, run_dir=tmp_path / "run", overwrite=True, progress=False)


def test_resume_with_a_different_config_names_the_keys(tmp_path, tiny_overrides):
    cfg = resolve_config(None, tiny_overrides + ["epochs=1"])
    train(cfg, run_dir=tmp_path / "run", progress=False)
    other = resolve_config(None, tiny_overrides + ["epochs=1", "lr=0.5", "seed=3"])
    with pytest.raises(ConfigError, match="differs in lr, seed"):
        train(other, run_dir=tmp_path / "run", resume=True, progress=False)


def test_eval_reproduces_the_final_test_accuracy(tmp_path, tiny_overrides):
    run = train(
        resolve_config(None, tiny_overrides + ["ema_decay=0.9"]), run_dir=tmp_path / "run", progress=False
    )
    result = evaluate_run(run.run_dir)
    assert result["test_acc"] == pytest.approx(run.metrics[-1]["test_acc"])
    assert evaluate_run(run.run_dir, ema=True)["test_acc"] == pytest.approx(run.metrics[-1]["ema_test_acc"])


def test_eval_every_skips_intermediate_evaluations(tmp_path, tiny_overrides):
    run = train(
        resolve_config(None, tiny_overrides + ["epochs=3", "eval_every=0"]),
        run_dir=tmp_path / "r",
        progress=False,
    )
    assert [("test_acc" in row) for row in run.metrics] == [False, False, True]


def test_train_fraction_uses_a_stratified_subset(tmp_path, tiny_overrides):
    run = train(
        resolve_config(None, tiny_overrides + ["epochs=1", "per_class=5", "batch_size=10"]),
        run_dir=tmp_path / "r",
        progress=False,
    )
    assert run.metrics[-1]["epoch"] == 1
    assert run.metrics[-1]["images_per_s"] > 0


@pytest.mark.parametrize(
    "override, message",
    [
        ("dataset=cifar10", "dataset 'cifar10'"),
        ("model_args.patch_size=3", "patch_size 3 does not divide"),
        ("model_args.width=3", "takes no argument width"),
        ("init=magic", "unknown init scheme 'magic'"),
        ("track=[nonsense]", "unknown tracker 'nonsense'"),
    ],
)
def test_bad_runs_fail_before_any_work(tmp_path, tiny_overrides, override, message):
    with pytest.raises(ConfigError if "dataset" not in override else Exception, match=message):
        train(resolve_config(None, tiny_overrides + [override]), run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_nonfinite_loss_stops_with_step_checkpoint_and_causes(tmp_path, tiny_overrides):
    cfg = resolve_config(None, tiny_overrides + ["lr=1e30", "optimizer=sgd", "epochs=2"])
    with pytest.raises(TrainingDiverged) as info:
        train(cfg, run_dir=tmp_path / "run", progress=False)
    message = str(info.value)
    assert "non-finite" in message and "epoch" in message and "step" in message
    assert "lr too high" in message and "precision" in message and "\n" not in message


def test_nonfinite_steps_are_skipped_up_to_the_limit(tmp_path, tiny_overrides, monkeypatch):
    calls = {"n": 0}
    original = MixupCutmix.__call__

    def poison_three_batches(self, images, labels):
        calls["n"] += 1
        out_images, targets = original(self, images, labels)
        return (out_images * float("nan") if calls["n"] in (2, 5, 7) else out_images), targets

    monkeypatch.setattr(MixupCutmix, "__call__", poison_three_batches)
    cfg = resolve_config(None, tiny_overrides + ["on_nonfinite=skip", "max_nonfinite_skips=3"])
    run = train(cfg, run_dir=tmp_path / "run", progress=False)
    assert all(torch.isfinite(p).all() for p in run.model.parameters())
    calls["n"] = 0
    cfg = resolve_config(None, tiny_overrides + ["on_nonfinite=skip", "max_nonfinite_skips=2"])
    with pytest.raises(TrainingDiverged, match="over max_nonfinite_skips"):
        train(cfg, run_dir=tmp_path / "run2", progress=False)


def test_hard_distillation_pulls_the_student_towards_the_teacher(tmp_path, tiny_overrides, digits):
    teacher = train(resolve_config(None, tiny_overrides + ["epochs=3", "lr=3e-3"]), run_dir=tmp_path / "t",
                    progress=False)  # fmt: skip
    only_teacher = tiny_overrides + ["seed=1", f"teacher={tmp_path / 't'}", "distill_weight=1.0"]
    student = train(resolve_config(None, only_teacher), run_dir=tmp_path / "s", progress=False)
    plain = train(resolve_config(None, tiny_overrides + ["seed=1"]), run_dir=tmp_path / "p", progress=False)

    from convinit.data import BatchAugment

    x = BatchAugment(digits.mean, digits.std)(digits.test_images)
    with torch.no_grad():
        target = teacher.model.eval()(x).argmax(1)
        agree_student = (student.model.eval()(x).argmax(1) == target).float().mean()
        agree_plain = (plain.model.eval()(x).argmax(1) == target).float().mean()
    # trained on the teacher's labels alone, the student agrees with it more than the same model trained on
    # the true labels does
    assert agree_student > agree_plain


def test_teacher_that_is_not_a_run_or_model_is_rejected(tmp_path, tiny_overrides):
    with pytest.raises(ConfigError, match="neither a run directory nor a saved model"):
        train(
            resolve_config(None, tiny_overrides + [f"teacher={tmp_path}"]),
            run_dir=tmp_path / "r",
            progress=False,
        )


def test_progress_names_training_accuracy_and_the_data_found(tmp_path, tiny_overrides, capsys):
    """The bar's accuracy is the training batches' (a test accuracy would read otherwise), and the run
    says which classes and how many training / test images it found before training on them."""
    overrides = [*tiny_overrides, "per_class=50", "log_every=1"]
    train(resolve_config(None, overrides), run_dir=tmp_path / "run", progress=True)
    err = capsys.readouterr().err
    assert "dataset: digits, 10 classes (0, 1, 2, ..., 8, 9), 500 training / 797 test images\n" in err
    assert "train_acc=" in err and " acc=" not in err


def test_progress_bar_shows_the_loss_on_a_run_shorter_than_log_every(tmp_path, tiny_overrides, capsys):
    """5 steps per epoch against log_every=10: the bar still shows loss and train_acc, at each epoch end."""
    overrides = [*tiny_overrides, "per_class=50"]  # 500 images at batch 100
    train(resolve_config(None, overrides), run_dir=tmp_path / "run", progress=True)
    err = capsys.readouterr().err
    assert "epoch=1/2" in err and "epoch=2/2" in err
    assert "loss=" in err and "train_acc=" in err


def test_data_line_of_a_cpu_run_says_where_the_images_are_in_words(tmp_path, tiny_overrides, capsys):
    train(resolve_config(None, [*tiny_overrides, "epochs=1"]), run_dir=tmp_path / "run", progress=True)
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("data: "))
    assert line.startswith(
        "data: 1,797 images (1,000 training, 797 test) held in memory (0.00 GiB), decoded once;"
    )
    assert "device" not in line and "budget" not in line


def test_a_cpu_run_trains_with_subnormals_flushed_and_puts_the_setting_back(
    tmp_path, tiny_overrides, monkeypatch
):
    """Impulse's peaked maps leave subnormal floats that a CPU computes slowly (convinit.system.denormals)."""
    from convinit.system.denormals import flushes_denormals, flushes_in_every_thread
    from convinit.train import trainer

    seen = []

    def step(*args):
        seen.append(flushes_in_every_thread())
        return train_step(*args)

    train_step, threads = trainer.train_step, torch.get_num_threads()
    monkeypatch.setattr(trainer, "train_step", step)
    overrides = [*tiny_overrides, "epochs=1", "per_class=20", "threads=2"]  # two threads: both flushed
    try:
        train(resolve_config(None, overrides), run_dir=tmp_path / "r", progress=False)
        assert seen and all(seen)
        assert not flushes_denormals() and not flushes_in_every_thread()
    finally:
        torch.set_num_threads(threads)
