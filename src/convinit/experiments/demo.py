"""`convinit demo`: the one-command answer on the embedded digits set.

Trains side by side, with the same data, optimiser and budget: a small ViT with random, mimetic and
impulse initialisation (paper 1; Q/K see alpha*LN(x) + (1-alpha)*P with alpha 0.1, docs/method.md §3),
a standard ViT for reference, a small ConViT and its DeiT twin (paper 2) and a ConvMixer with frozen
impulse filters (the CNN reference). Writes a report directory: report.md, results.csv, curves.png and
attention maps at initialisation and after training.

Why these sizes: digits is 8x8 with 1,000 training images; one-pixel patches give a 8x8 grid (64
tokens), enough for 3x3 convolutional structure to matter, and width 64 / depth 4 / 4 heads train at
hundreds of images per second on 2 CPU cores, so each model takes well under a minute (docs/method.md §7
measured the effect as large and visible at this scale). `--quick` gives the ViTs and the ConvMixer
2x2-pixel patches, the 4x4 grid of the ConViT and DeiT, so that the whole demo fits in a minute on one
core (QUICK_PATCH).
"""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convinit.analysis.init_summary import init_markdown, init_rows, positional_row
from convinit.config import TrainConfig, build_config
from convinit.errors import ConfigError
from convinit.experiments.grid import slug
from convinit.experiments.report import find_runs, plot_curves, resolution_note, summarise, test_images
from convinit.experiments.runner import changed_runs, run_state
from convinit.runs.provenance import provenance
from convinit.runs.signals import continue_with
from convinit.system.atomic import atomic_write_text, atomic_writer, make_folder
from convinit.system.folder_publish import writable_folder
from convinit.system.heap import heap_frozen
from convinit.train import train, validate

# what a demo folder holds: a rerun resumes in it (finished methods are skipped)
DEMO_FILES = ("runs", "attention", "curves.png", "report.md", "results.csv")


def vit(patch_size: int = 1) -> dict[str, Any]:
    """The demo's ViT: width 64, depth 4, 4 heads, on patches of `patch_size` pixels."""
    return {
        "model": "simplevit",
        "model_args": {
            "patch_size": patch_size,
            "dim": 64,
            "depth": 4,
            "heads": 4,
            "dim_head": 16,
            "mlp_dim": 128,
        },
    }


BLEND = {"model_args": {"qk_input": "blend", "alpha": 0.1}}
CONVIT_ARGS = {"patch_size": 2, "embed_dim": 64, "num_heads": 4, "depth": 4, "local_up_to_layer": 3}
COMMON = {
    "dataset": "digits",
    "batch_size": 64,
    "optimizer": "adamw",
    "lr": 1e-3,
    "weight_decay": 0.05,
    "eval_batch_size": 1000,
}


@dataclass
class DemoMethod:
    label: str
    overrides: dict[str, Any]


def deep_merge(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = (
                {**out[key], **value} if isinstance(value, dict) and isinstance(out.get(key), dict) else value
            )
    return out


def demo_methods(patch: int = 1) -> list[DemoMethod]:
    """The seven methods; the four ViTs and the ConvMixer on patches of `patch` pixels (the full demo's 1,
    --quick's 2), the ConViT and its DeiT twin on 2 in both."""
    base = vit(patch)
    return [
        DemoMethod("ViT, standard attention, random init", deep_merge(base)),
        DemoMethod("ViT + alpha-blend, random init", deep_merge(base, BLEND)),
        DemoMethod("ViT + alpha-blend, mimetic init", deep_merge(base, BLEND, {"init": "mimetic"})),
        DemoMethod("ViT + alpha-blend, impulse init", deep_merge(base, BLEND, {"init": "impulse"})),
        DemoMethod("ConViT (GPSA, local init)", {"model": "convit_tiny", "model_args": CONVIT_ARGS}),
        DemoMethod(
            "DeiT twin of the ConViT",
            {
                "model": "deit_tiny",
                "model_args": {k: v for k, v in CONVIT_ARGS.items() if k != "local_up_to_layer"},
            },
        ),
        DemoMethod(
            "ConvMixer, frozen impulse filters",
            {
                "model": "convmixer",
                "model_args": {
                    "dim": 64,
                    "depth": 4,
                    "kernel_size": 3,
                    "patch_size": patch,
                    "spatial": "impulse",
                },
            },
        ),
    ]


def demo_config(method: DemoMethod, epochs: int, seed: int, eval_every: int = 1) -> TrainConfig:
    """The method's config on the common recipe (the model's arguments are the method's alone)."""
    schedule = {
        "epochs": epochs,
        "warmup_epochs": min(1.0, epochs / 4),
        "seed": seed,
        "eval_every": eval_every,
    }
    return build_config(deep_merge(COMMON, method.overrides, schedule))


def parameter_count(run_dir: Path) -> int:
    from safetensors.torch import load_file

    from convinit.runs.checkpoint import latest_checkpoint

    return sum(t.numel() for t in load_file(latest_checkpoint(run_dir) / "model.safetensors").values())


# --quick: 10 epochs, the shortest run whose final accuracies keep the papers' order (standard ViT <
# alpha-blend random < mimetic < impulse; DeiT < ConViT). At 4 epochs (64 steps, a quarter of them
# warm-up, the cosine then almost at zero) every attention ViT is still climbing out of chance: mimetic
# and impulse cross each other until about epoch 5 of the full demo, and seed 0 put mimetic ahead.
QUICK_EPOCHS, FULL_EPOCHS = 10, 20
# --quick evaluates on the test set after every second epoch (and at step 0 and the end): a forward pass
# over the 797 test digits costs about a third of an epoch's training, so evaluating after every epoch
# made a fifth of the quick demo's time. Training is the same either way (evaluation draws no random
# numbers), so the final accuracies are those of an every-epoch run; the curves have half the points.
QUICK_EVAL_EVERY = 2
# --quick's ViTs see 2x2-pixel patches: a 4x4 grid of 16 tokens, the grid the demo's ConViT and DeiT see
# in both demos. On one CPU core a step then costs about a quarter of a one-pixel ViT's (64 tokens): the
# four ViTs trained 50 of the 66 s the quick demo spent training, which no faster kernel could bring
# within a minute (docs/speed.md). The papers' order held at 2x2 on seeds 0, 1 and 2 with gaps of 4 points
# or more (standard < blend random < mimetic < impulse; DeiT < ConViT). The ConvMixer, the CNN reference,
# sees the same 4x4 grid (every --quick model then does), at half its one-pixel time; it stays first
# (96.2 / 96.1 / 95.9 % on seeds 0-2, 95.9 % on one-pixel patches).
QUICK_PATCH = 2


DEFAULT_OUT, QUICK_OUT = "reports/demo", "reports/demo-quick"  # apart: a folder holds one demo's runs


def default_out(quick: bool) -> Path:
    return Path(QUICK_OUT if quick else DEFAULT_OUT)


def run_demo(
    out: str | Path | None = None,
    quick: bool = False,
    seed: int = 0,
    progress: bool = True,
    epochs: int | None = None,
) -> Path:
    """Train every demo method (20 epochs; 10 with `quick`, its ViTs and ConvMixer on 2x2-pixel patches)
    into `out` (default reports/demo, reports/demo-quick with `quick`) and write the report; returns
    report.md's path."""
    out = Path(out) if out is not None else default_out(quick)
    writable_folder(out, DEMO_FILES)  # a file or a read-only place: one line now, not after training
    epochs = epochs or (QUICK_EPOCHS if quick else FULL_EPOCHS)
    methods = demo_methods(QUICK_PATCH if quick else 1)
    eval_every = QUICK_EVAL_EVERY if quick else 1
    configs = [demo_config(m, epochs, seed, eval_every) for m in methods]
    for cfg in configs:  # every model builds and the data is there before anything trains
        validate(cfg)
    check_same_demo(out, methods, configs)
    if short_run_caveat(epochs):
        print(f"convinit: warning: {short_run_caveat(epochs)}", file=sys.stderr)
    with continue_with(demo_command(out, quick, seed, epochs)):  # a stop says: rerun the demo
        train_methods(out, methods, configs, seed, progress)
    return write_demo_report(out, epochs)


def short_run_caveat(epochs: int) -> str:
    """Why a demo shorter than --quick's cannot show the papers' order ('' when it can)."""
    if epochs >= QUICK_EPOCHS:
        return ""
    return (
        f"{epochs} epochs are too few to order the initialisations: every attention ViT is still near "
        f"chance and their order is noise at this length; {QUICK_EPOCHS} (--quick) or more show it"
    )


def demo_command(out: Path, quick: bool, seed: int, epochs: int) -> str:
    """The `convinit demo` command that continues this demo (finished methods are kept)."""
    if epochs != (QUICK_EPOCHS if quick else FULL_EPOCHS):  # other epochs are Python's alone
        return f"run_demo(out={str(out)!r}, seed={seed}, epochs={epochs})"
    where = f" --out {out}" if out != default_out(quick) else ""
    return f"convinit demo{where}" + (" --quick" if quick else "") + (f" --seed {seed}" if seed else "")


def run_folder(index: int, method: DemoMethod) -> str:
    """A method's run folder under the demo's `runs/`: its place in the table, then its label."""
    return f"{index}-{slug(method.label)}"


def check_same_demo(out: Path, methods: list[DemoMethod], configs: list[TrainConfig]) -> None:
    """Refuse, before anything trains, a folder whose runs another demo trained (`--quick` then the full
    demo, another seed): skipped as finished, they would be reported as this demo's."""
    planned = [
        (run_folder(i, method), cfg) for i, (method, cfg) in enumerate(zip(methods, configs, strict=True))
    ]
    changed = changed_runs(out / "runs", planned)
    if changed:
        raise ConfigError(
            f"{out} holds another demo ({', '.join(changed[0][1])} differ from this one's): pass --out to "
            "write this one elsewhere, or remove the folder"
        )


def train_methods(
    out: Path, methods: list[DemoMethod], configs: list[TrainConfig], seed: int, progress: bool
) -> None:
    """Train each method into out/runs/<index>-<label>: finished ones skipped, stopped ones resumed."""
    for index, (method, cfg) in enumerate(zip(methods, configs, strict=True)):
        run_dir = out / "runs" / run_folder(index, method)
        if run_state(run_dir) == "finished":
            continue
        make_folder(run_dir, inside=out)  # neither `runs` nor a method's folder may be a link
        atomic_write_text(  # never through a link the folder may hold
            run_dir / "experiment.json",
            json.dumps(
                {"experiment": "demo", "label": method.label, "seed": seed, "preset": "demo", **provenance()}
            ),
        )
        if progress:
            print(f"[{index + 1}/{len(methods)}] {method.label}")
        train(
            cfg if run_state(run_dir) == "new" else None,
            run_dir=run_dir,
            resume=run_state(run_dir) == "partial",
            progress=progress,
        )


def step0_and_figures(out: Path, records: list) -> tuple[list[dict[str, Any]], list[tuple[str, list[Path]]]]:
    """The init table's rows (GPSA models measured from their rebuilt init, the others from their
    init_report.json) and the attention figures at init and after training, per run."""
    from convinit.experiments.attention_figures import draw_attention, has_attention, model_at_init

    rows, figures = [], []
    for record in records:
        run = model_at_init(record.run_dir)
        positional = positional_row(record.label, run.model, run.init_images)  # before the trained weights
        rows += [positional] if positional else init_rows([(record.label, [record.run_dir])])
        if not has_attention(run.model):
            rows[-1]["qk_input"] = "no attention"
            if run.cfg.init == "random":  # the scheme that leaves the model's own init: say what that is
                rows[-1]["init"] = own_init(run.cfg)
        images = draw_attention(run, record.run_dir, out / "attention", record.label)
        if images:
            figures.append((record.label, [p.relative_to(out) for p in images]))
    return rows, figures


def own_init(cfg: TrainConfig) -> str:
    """A model's own initialisation, as the init table names it: PyTorch's default for its layers, and a
    ConvMixer's fixed spatial filters ('impulse': each depthwise filter one tap, frozen)."""
    spatial = cfg.model_args.get("spatial", "learned") if cfg.model == "convmixer" else "learned"
    fixed = f", frozen {spatial} depthwise filters" if spatial not in ("learned", "random") else ""
    return f"PyTorch default{fixed}"


def patches_in_words(records: list) -> str:
    """The ViTs' and ConvMixer's patches and grid in words, read from the first run's saved config (what
    trained)."""
    patch = records[0].config["model_args"]["patch_size"]
    side = 8 // patch
    size = "one-pixel patches" if patch == 1 else f"{patch}x{patch}-pixel patches"
    return f"{size} ({side}x{side} grid of {side * side} tokens)"


RESULT_COLUMNS = ("method", "parameters", "final_test_acc_mean", "epochs", "seconds", "images_per_s")


def write_results_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with atomic_writer(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(RESULT_COLUMNS)
        for row in rows:
            writer.writerow([row[c] for c in RESULT_COLUMNS])


def write_demo_report(out: Path, epochs: int) -> Path:
    records = find_runs(out / "runs")
    rows = summarise(records)
    for row, record in zip(rows, records, strict=True):
        row["parameters"] = parameter_count(record.run_dir)
    plot_curves(records, out / "curves.png", f"convinit demo on digits: test accuracy, {epochs} epochs")
    with heap_frozen():  # drawing starts full collector passes over the models' objects (docs/speed.md)
        step0, figures = step0_and_figures(out, records)
    write_results_csv(out / "results.csv", rows)
    table = [
        "| method | parameters | final test acc (%) | epochs | seconds | images/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        table.append(
            f"| {row['method']} | {row['parameters']:,} | {row['final_test_acc_mean']:.1f} | {row['epochs']} "
            f"| {row['seconds']:.0f} | {row['images_per_s']:.0f} |"
        )
    info = provenance()
    resolution = resolution_note(test_images(records), [row["final_test_acc_mean"] for row in rows])
    text = [
        "# convinit demo: how much does a convolutional inductive bias buy a ViT on a small dataset?",
        "",
        "\n".join(table),
        "",
        "Data: scikit-learn's digits (8x8 grey images), fixed stratified split of 1,000 training and 797 "
        f"test images. Every model: {epochs} epochs, batch 64, AdamW lr 1e-3 "
        f"({min(1.0, epochs / 4):g} warm-up epoch, cosine), weight decay "
        "0.05, no augmentation, seed "
        f"{records[0].seed}. ViTs and ConvMixer: {patches_in_words(records)}. ViTs: width 64, depth 4, "
        "4 heads; "
        "alpha-blend ViTs feed alpha*LN(x) + (1-alpha)*P to Q/K with alpha 0.1 (paper 1, Model I/II family); "
        "ConViT/DeiT: 2x2-pixel patches (4x4 grid), width 64, depth 4, 4 heads (ConViT: 3 GPSA + 1 MHSA); "
        "ConvMixer: width 64, depth 4, "
        "3x3 depthwise filters frozen to random impulses. Final-epoch test accuracy of one seed: differences "
        "of a few points are within seed noise at this scale (see `convinit reproduce` for seeds).",
        *(["", f"**{short_run_caveat(epochs)}.**"] if short_run_caveat(epochs) else []),
        *(["", resolution] if resolution else []),
        "",
        "![learning curves](curves.png)",
        "",
        init_markdown(step0),
        "",
        "## Attention at initialisation and after training",
        "",
        *[
            f"**{label}**: at initialisation, then after training\n\n![init]({init})\n![trained]({trained})\n"
            for label, (init, trained) in figures
        ],
        f"convinit {info['convinit_version']} @ {info['git_commit'][:12]}, torch {info['torch_version']}.",
    ]
    atomic_write_text(out / "report.md", "\n".join(text) + "\n")
    print("\n".join(table + ([f"\n{resolution}"] if resolution else [])))
    return out / "report.md"
