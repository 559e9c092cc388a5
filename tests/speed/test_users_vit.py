"""The users'-regime benchmark (benchmarks/users_vit_speed.py) at toy scale: every row is built through
the trainer's step and timed, and on a pretend CUDA device each conversion's step launches the same ops
at two batch sizes and waits on the host never. Facts, not timings: no figure is asserted."""

from __future__ import annotations

import pytest
import torch

from convinit.speed.users_vit import ROWS, UsersOptions, format_users, run_users_bench

TINY = UsersOptions(threads=[1], compile=False, batch_size=2, vit_ti_batch_size=1, warmup=0, repeats=1,
                    initialize=False, fake_batches=(2, 8))  # fmt: skip


@pytest.fixture(scope="module")
def tiny_result():
    return run_users_bench(TINY, say=lambda message: None)


def test_the_table_has_every_row_beside_its_timm_twin_and_both_grids(tiny_result):
    rates = tiny_result["threads"][1]["images_per_s"]
    assert {f"{label}/eager" for label in ROWS} | {f"timm {row.twin}/eager" for row in ROWS.values()} == set(
        rates
    )
    bias = [label for label, row in ROWS.items() if row.bias]
    assert set(tiny_result["grid_14x14"]["images_per_s"]) == {f"{b}/eager" for b in bias} | {
        "timm users' ViT/eager"
    }
    text = format_users(tiny_result)
    assert all(label in text for label in ROWS)


@pytest.mark.skipif(not torch.backends.cuda.is_built(), reason="faking CUDA needs a torch built with CUDA")
def test_each_conversions_step_launches_the_same_device_ops_at_both_batches_and_never_waits(tiny_result):
    counts = tiny_result["device"]
    assert set(counts) == {label for label, row in ROWS.items() if row.bias}
    for label, by_batch in counts.items():
        small, large = by_batch[2], by_batch[8]
        assert small["ops"] == large["ops"] > 0, label
        assert small["host_waits"] == large["host_waits"] == 0, (label, small["waits"])


def test_head_rows_run_each_head_count_with_and_without_the_kernel_beside_timm_with_as_many_heads():
    from convinit.speed.users_vit import row_config, timm_twin

    rows = {label: row for label, row in ROWS.items() if row.twin.startswith("users' ViT, ")}
    assert {(row.twin, row.small_heads) for row in rows.values()} == {
        (f"users' ViT, {heads} heads", kernel) for heads in (8, 16) for kernel in (False, True)
    }
    for row in rows.values():
        cfg = row_config(row, "7x7", 2, compile=False)
        heads = int(row.twin.split(", ")[1].split()[0])
        assert cfg.model_args["num_heads"] == heads and cfg.flush_denormal
        assert timm_twin(row.twin, cfg, (1, 28, 28))().blocks[0].attn.num_heads == heads
