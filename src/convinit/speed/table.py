"""A `convinit bench` result as the compact text table BENCHMARKS.md quotes."""

from __future__ import annotations

from typing import Any


def format_result(result: dict[str, Any]) -> str:
    machine, settings = result["machine"], result["settings"]
    where = machine.get("gpu") or f"{machine['cpu']}, {machine['torch_threads']} torch threads"
    lines = [
        f"convinit bench: {machine['device']} ({where}), torch {machine['torch']}, "
        f"{settings['precision']}, batch {settings['batch_size']}, input "
        f"{'x'.join(str(n) for n in settings['input'])}, median of {settings['repeats']} interleaved rounds",
        f"matmul rate: {1e3 * result['matmul']['tflop_per_s']:.0f} GFLOP/s ({result['matmul']['dtype']}, "
        f"square {result['matmul']['size']}); each group is also timed beside it: 'of matmul' uses that",
        "",
        f"{'model':24s} {'row':40s} {'train img/s':>11s} {'infer img/s':>11s} {'GFLOP/img':>9s} "
        f"{'matmul GFLOP/s':>14s} {'of matmul':>9s}",
    ]
    for row in result["models"]:
        lines.append(
            f"{row['model']:24s} {row['row']:40s} {row['train_images_per_s']:11.1f} "
            f"{row['infer_images_per_s']:11.1f} {row['train_gflop_per_image']:9.2f} "
            f"{1e3 * row['matmul_tflop_per_s']:14.0f} {100 * row['matmul_fraction']:8.0f}%"
        )
    lines += ["", "ratios"]
    lines += [f"  {name}: {value:.2f}x" for name, value in result["ratios"].items()]
    if "pipeline" in result:
        pipeline = result["pipeline"]
        lines += [
            "",
            f"data pipeline (DeiT augmentation + mixup/cutmix, batch {pipeline['batch_size']}): "
            f"{pipeline['images_per_s']:.0f} img/s",
        ]
    if "stream" in result:
        stream = result["stream"]
        per_worker = ", ".join(f"{n} workers {v:.0f}" for n, v in stream["images_per_s"].items())
        where = f"{stream['source']} -> DeiT transforms at {stream['img_size']} px"
        lines.append(f"streamed path ({where}), img/s: {per_worker}")
    for name, epoch in result.get("epoch", {}).items():
        lines.append(
            f"one {settings['epoch_images']}-image epoch, {name} ({epoch['row']}): "
            f"{epoch['seconds']:.1f} s, {epoch['images_per_s']:.0f} img/s"
        )
    if "impulse_init" in result:
        closed, optimizer = result["impulse_init"]["closed_form"], result["impulse_init"]["optimizer"]
        gpsa = result["gpsa"]
        lines += [
            "",
            f"impulse init, closed form, all of {closed['model']}: {closed['seconds']:.2f} s "
            f"(kernel {closed['kernel_size']}, mass {closed['mean_mass']:.3f}, "
            f"argmax {closed['argmax_agreement']:.3f})",
            *fitted_on_images_line(result["impulse_init"].get("closed_form_images")),
            f"impulse init, paper's optimiser, one layer: {1e3 * optimizer['seconds_per_step']:.1f} ms/step, "
            f"{optimizer['projected_paper_seconds_per_layer']:.0f} s per layer for 10,000 steps",
            f"GPSA layer fwd+bwd {gpsa['gpsa_ms']:.1f} ms vs MHSA {gpsa['mhsa_ms']:.1f} ms "
            f"({gpsa['gpsa_over_mhsa']:.2f}x; batch {gpsa['shape']['batch']}, N {gpsa['shape']['tokens']}, "
            f"D {gpsa['shape']['dim']}, {gpsa['shape']['heads']} heads); positional map "
            f"{gpsa['positional_map_ms']:.2f} ms per forward+backward",
        ]
    lines += [f"note: {note}" for note in result.get("notes", [])]
    lines.append(f"\ntotal {result['seconds']:.0f} s")
    return "\n".join(lines)


def fitted_on_images_line(fit: dict | None) -> list[str]:
    """The closed form fitted on real images: time and real-pass mass (fitted / held-apart images)."""
    if fit is None:
        return []
    return [
        f"impulse init, closed form fitted on {fit['images']} {fit['dataset']} images, "
        f"all of {fit['model']}: "
        f"{fit['seconds']:.2f} s with {fit['threads']} threads (real-pass mass {fit['real_pass_mass']:.3f} "
        f"fitted, {fit['held_out_mass']:.3f} held apart)"
    ]
