"""The `convinit` command: argument parsing only; each subcommand calls one library function.

User mistakes (a ConvinitError) end with one line `convinit: error: ...` and exit code 2, before any
training starts; a run whose loss diverges (TrainingDiverged) ends the same way with exit code 3.
Ctrl-C (SIGINT) or SIGTERM during training saves a checkpoint at the next step boundary and exits
with 130 or 143. A reader of stdout that has gone (`convinit reproduce --list | head -1`) ends the
command quietly with 141, as SIGPIPE ends other tools.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import NoReturn

from convinit.errors import ConfigError, ConvinitError, TrainingDiverged
from convinit.system.version import VERSION

EXAMPLES = """examples:
  convinit train                                  # default preset: a small ViT on the embedded digits set
  convinit train --config default dataset=fashion-mnist train_fraction=0.05 epochs=5
  convinit train model_args.dim=128 lr=3e-3 --out runs/wide
  convinit train --epochs 3 --lr 3e-3             # --key value is key=value, for every key
  convinit train --resume runs/wide               # continue an interrupted run
  convinit eval runs/wide
"""


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage mistakes (`--seed abc`) are one line and exit code 2, like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"convinit: error: {self.prog}: {message} (see {self.prog} --help)\n")


def one_line_warning(message: Warning | str, *_: object, **__: object) -> str:
    """How the command prints a warning: `convinit: warning: ...`, without Python's file and source line."""
    return f"convinit: warning: {' '.join(str(message).split())}\n"


def cmd_train(args: argparse.Namespace) -> int:
    from convinit.config import build_config, load_config, merge, parse_overrides, resolve_config
    from convinit.runs.run_dir import CONFIG_FILE
    from convinit.train import train

    overrides = list(args.overrides)
    for flag, key in ((args.seed, "seed"), (args.device, "device")):
        if flag is not None:
            overrides.append(f"{key}={flag}")
    if args.deterministic:
        overrides.append("deterministic=true")
    if args.out is not None and not args.out.strip():
        raise ConfigError("--out is empty; name a folder for the run, e.g. --out runs/first")
    if args.resume and args.dry_run:
        raise ConfigError("--dry-run shows what a new run would train; a resumed run trains its config.yaml")
    if args.resume:
        cfg = None
        if args.config:
            cfg = resolve_config(args.config, overrides)
        elif overrides and (args.resume / CONFIG_FILE).is_file():  # overrides apply to the saved config
            saved = load_config(args.resume / CONFIG_FILE).to_dict()
            cfg = build_config(merge(saved, parse_overrides(overrides)))
        run = train(cfg, run_dir=args.resume, resume=True, progress=not args.no_progress)
    else:
        cfg = resolve_config(args.config, overrides)
        if args.dry_run:  # config.yaml as the run would write it, and the notes; nothing written
            import yaml

            from convinit.train import decided_config

            print(yaml.safe_dump(decided_config(cfg).to_dict(), sort_keys=False), end="")
            return 0
        out = Path(args.out) if args.out is not None else None
        run = train(cfg, run_dir=out, overwrite=args.overwrite, progress=not args.no_progress)
    final = run.metrics[-1]
    split = "validation" if run.held_out else "test"  # holdout_per_class: the test set was not read
    print(f"run {run.run_dir}: epoch {final['epoch']}, {split} accuracy {final['test_acc']:.2f}%")
    if run.still_learning:
        print(f"convinit: note: {run.still_learning}", file=sys.stderr)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from convinit.train.trainer import evaluate_run, evaluation_line

    print(evaluation_line(evaluate_run(args.run_dir, ema=args.ema, device=args.device), args.ema))
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    from convinit.config import parse_overrides
    from convinit.data.datasets import survey_datasets

    given = parse_overrides(args.overrides)
    if set(given) - {"data_dir"}:
        raise ConfigError(f"datasets takes only data_dir=DIR, got {', '.join(args.overrides)}")
    folder, rows = survey_datasets(given.get("data_dir", args.data_dir))
    if folder is not None:
        print(folder)
    for name, status, place, found in rows:
        print(f"{name:15s} {status:10s} {place}: {found}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from convinit.models.presets import PRESETS  # a table: listing needs no torch

    print("\n".join(sorted(PRESETS)))
    return 0


def cmd_configs(args: argparse.Namespace) -> int:
    from convinit.config import preset_names

    print("\n".join(preset_names()))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from convinit.experiments.demo import run_demo

    report = run_demo(args.out, quick=args.quick, seed=args.seed, progress=not args.no_progress)
    print(f"report: {report}")
    return 0


def seed_list(text: str | None) -> list[int] | None:
    """--seeds N (seeds 0..N-1) or a list 0,1,2."""
    if text is None:
        return None
    if text.isdigit():
        if int(text) == 0:
            raise ConfigError("--seeds 0 asks for no runs; give a count of seeds (1, 3) or a list like 0,1,2")
        return list(range(int(text)))
    seeds = [s.strip() for s in text.split(",") if s.strip()]
    if not seeds or not all(s.isdigit() for s in seeds):
        raise ConfigError(f"--seeds {text!r} is neither a count N nor a list of seeds like 0,1,2")
    return [int(s) for s in seeds]


def parse_methods(items: list[str]) -> dict[str, tuple[str, dict]]:
    """--method LABEL=PRESET [KEY=VALUE ...] options as {label: (preset, overrides)}; labels are unique."""
    from convinit.config import parse_overrides

    methods: dict[str, tuple[str, dict]] = {}
    for item in items:
        label, sep, spec = item.partition("=")
        if not sep or not label.strip() or not spec.split():
            raise ConfigError(
                f'--method {item!r} is not LABEL=PRESET [KEY=VALUE ...], e.g. "impulse=default init=impulse"'
            )
        if label in methods:
            raise ConfigError(f"--method label {label!r} is given twice; give each method its own label")
        preset, *overrides = spec.split()
        methods[label] = (preset, parse_overrides(overrides))
    return methods


def parse_fractions(text: str) -> list[float]:
    try:
        fractions = [float(f) for f in text.split(",") if f.strip()]
    except ValueError:
        fractions = []
    if not fractions or not all(0 < f <= 1 for f in fractions):
        raise ConfigError(
            f"--fractions {text!r} must be numbers in (0, 1] separated by commas, e.g. 0.1,0.5,1"
        )
    return fractions


def cmd_reproduce(args: argparse.Namespace) -> int:
    if args.list or not args.name:  # a listing: answers at once, without torch
        from convinit.experiments.grid import list_experiments, load_experiment

        for name in list_experiments():
            print(f"{name:28s} {load_experiment(name).get('description', '')}")
        return 0
    from convinit.config import parse_overrides
    from convinit.experiments.grid import expand, select_rows
    from convinit.experiments.report import write_report
    from convinit.experiments.runner import nothing_trained, run_grid

    extra = parse_overrides(args.overrides)
    for key in ("dataset", "data_dir"):
        if getattr(args, key) is not None:
            extra[key] = getattr(args, key)
    runs = select_rows(expand(args.name, args.scale, seed_list(args.seeds), extra), args.row)
    out = args.out or Path("runs") / f"{args.name}-{args.scale}"
    outcome = run_grid(runs, out, args.launcher, args.jobs, not args.no_progress, slurm_options(args))
    for run_dir, what in outcome.items():
        print(f"{what:10s} {run_dir}")
    if args.launcher == "local" and nothing_trained(outcome, out):  # SLURM: the jobs trained them
        print(nothing_trained(outcome, out))
    if not still_queued(outcome):
        print(f"report: {write_report(out, title=args.name)}")
    return grid_exit_code(outcome)


def still_queued(outcome: dict[str, str]) -> bool:
    """Whether SLURM jobs still hold runs of the grid (its report is written by the rerun after they end);
    says so, with the command that shows their states."""
    from convinit.experiments.launchers import waiting

    if not waiting(outcome):
        return False
    print(
        f"{waiting(outcome)} of {len(outcome)} runs are queued or running under SLURM; run the same "
        "command again to see their states, and it writes the report once they have ended"
    )
    return True


def grid_exit_code(outcome: dict[str, str]) -> int:
    """0 when every run finished; 3 (with a line on stderr) when some failed, as a diverged run does."""
    from convinit.experiments.runner import failed

    if not failed(outcome):
        return 0
    print(
        f"convinit: error: {len(failed(outcome))} of {len(outcome)} runs failed (see the report)",
        file=sys.stderr,
    )
    return 3


def cmd_report(args: argparse.Namespace) -> int:
    from convinit.experiments.report import write_report

    print(f"report: {write_report(args.run_dir, args.out, reference=args.reference)}")
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    from convinit.experiments.results_page import render_page, results_paths
    from convinit.experiments.size_curves import figure_data, figure_name, kept_figure_data, plot_size_curve
    from convinit.system.atomic import atomic_write_text

    if args.out is not None and args.out.is_dir():
        raise ConfigError(
            f"--out {args.out} is a directory; give the page's file path (e.g. {args.out / 'results.md'})"
        )
    results, out = results_paths(args.results, args.out)
    page, curves = render_page(results)
    figures = {out.parent / figure_name(name): (name, points) for name, points in curves.items()}
    if args.check:
        stale = [out] if not (out.is_file() and out.read_text() == page) else []
        stale += [
            path for path, (_, points) in figures.items() if kept_figure_data(path) != figure_data(points)
        ]
        for path in stale:
            print(f"{path}: differs from what {results} gives; run convinit results")
        if not stale:
            print(f"{out}: up to date ({len(figures)} figures with it)")
        return 1 if stale else 0
    out.parent.mkdir(parents=True, exist_ok=True)  # --out in a folder not yet made: made, as its figures'
    atomic_write_text(out, page)
    for path, (name, points) in figures.items():
        plot_size_curve(name, points, path)
    print(f"results page: {out}" + "".join(f"\nfigure: {path}" for path in figures))
    return 0


def add_results_parser(sub) -> None:
    results = sub.add_parser("results", help="docs/results.md from the claim grids kept under results/")
    results.add_argument(
        "--results-dir",
        "--results",
        dest="results",
        type=Path,
        help="the folder holding claims.yaml and the kept runs (default: ./results, else the results/ of "
        "the checkout convinit is installed from)",
    )
    results.add_argument(
        "--out", type=Path, help="the page (default: docs/results.md beside the results folder)"
    )
    results.add_argument("--check", action="store_true", help="exit 1 if the page is not what it would be")
    results.set_defaults(func=cmd_results)


def cmd_efficiency(args: argparse.Namespace) -> int:
    from convinit.config import parse_overrides
    from convinit.experiments.efficiency import efficiency_runs, efficiency_summary
    from convinit.experiments.report import write_report
    from convinit.experiments.runner import nothing_trained, run_grid
    from convinit.system.atomic import atomic_write_text

    methods = parse_methods(args.method)
    fractions = parse_fractions(args.fractions)
    extra = parse_overrides(args.overrides)
    runs = efficiency_runs(methods, fractions, seed_list(args.seeds) or [0], args.scale_epochs, extra)
    for spec in runs:  # one folder per method / fraction / seed
        spec.label = f"{spec.extra['group']} @ {spec.extra['fraction']:g}"
    out = args.out or Path("runs") / "efficiency"
    outcome = run_grid(runs, out, args.launcher, args.jobs, not args.no_progress, slurm_options(args))
    if args.launcher == "local" and nothing_trained(outcome, out):  # SLURM: the jobs trained them
        print(nothing_trained(outcome, out))
    if still_queued(outcome):
        for run_dir, what in outcome.items():
            print(f"{what:10s} {run_dir}")
        return grid_exit_code(outcome)
    write_report(out, title="Data efficiency")
    summary = efficiency_summary(out)
    atomic_write_text(out / "efficiency.md", summary + "\n")
    print(summary)
    return grid_exit_code(outcome)


def cmd_vit_or_cnn(args: argparse.Namespace) -> int:
    from convinit.experiments.vit_or_cnn import vit_or_cnn

    out = args.out or Path("runs") / "vit-or-cnn"
    _, lines, outcome = vit_or_cnn(
        args.overrides, out, seed_list(args.seeds), args.epochs, args.quick, args.jobs, not args.no_progress
    )
    print("\n".join(lines))
    return grid_exit_code(outcome)


def cmd_analyze(args: argparse.Namespace) -> int:
    from convinit.experiments.attention_figures import analyze_run

    print("\n".join(analyze_run(args.run_dir)))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from convinit.share.export import export_run

    export_run(args.run_dir, args.out, push_to_hub=args.push_to_hub)
    print(f"saved {args.out} (config.json, model.safetensors, README.md model card)")
    if args.push_to_hub:
        print(f"pushed to https://huggingface.co/{args.push_to_hub}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from convinit.share.predict import predict

    for image, ranked in zip(args.images, predict(args.model, args.images, args.top), strict=True):
        print(f"{image}: " + ", ".join(f"{label} {p:.3f}" for label, p in ranked))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from convinit.speed import BenchOptions, run_bench
    from convinit.speed.table import format_result

    if args.out is not None and (args.out.is_dir() or not args.out.name):
        raise ConfigError(
            f"bench --out {args.out} is a folder; name the JSON file, e.g. {args.out / 'bench.json'}"
        )
    options = BenchOptions(
        models=args.models.split(",") if args.models else BenchOptions().models,
        batch_size=args.batch_size,
        device=args.device,
        precision=args.precision,
        compile=args.compile,
        channels_last=args.channels_last,
        timm=not args.no_timm,
        warmup=args.warmup,
        repeats=args.repeats,
        pipeline=not args.no_pipeline,
        stream_workers=[int(n) for n in args.stream_workers.split(",") if n] if args.stream_workers else [],
        costs=not args.no_costs,
        epoch=args.epoch,
        epoch_images=args.epoch_images,
    )
    result = run_bench(options, progress=lambda message: print(f"bench: {message}", file=sys.stderr))
    if args.out is not None:
        from convinit.system.atomic import atomic_write_text

        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, json.dumps(result, indent=1))
    print(json.dumps(result, indent=1) if args.json else format_result(result))
    return 0


def add_run_commands(sub: argparse._SubParsersAction) -> None:
    """train and eval: a run and its newest checkpoint."""
    train = sub.add_parser(
        "train",
        help="train a model from a preset plus key=value overrides",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides, e.g. epochs=3 lr=3e-3 model_args.dim=128 (see `convinit configs`)",
    )
    train.add_argument(
        "--config",
        "-c",
        help="preset name (`convinit configs`) or a YAML file; default: own_data for dataset=folder or "
        "dataset=hf (your own images), default otherwise",
    )
    train.add_argument("--out", "-o", help="run directory (default: runs/<model>-<dataset>-s<seed>-<time>)")
    train.add_argument(
        "--resume", type=Path, metavar="RUN_DIR", help="continue RUN_DIR from its newest checkpoint"
    )
    train.add_argument(
        "--overwrite", action="store_true", help="replace the run (finished or not) in --out: start clean"
    )
    train.add_argument("--seed", type=int, help="random seed (same as seed=N)")
    train.add_argument(
        "--deterministic", action="store_true", help="deterministic algorithms (bit-exact resume on CPU)"
    )
    train.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: auto)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument(
        "--dry-run",
        action="store_true",
        help="print the config the run would train and save (config.yaml) with its notes, and exit",
    )
    train.set_defaults(func=cmd_train)

    evaluate = sub.add_parser("eval", help="test accuracy of a run's newest checkpoint")
    evaluate.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    evaluate.add_argument("--ema", action="store_true", help="evaluate the EMA weights")
    evaluate.add_argument("--device", default="auto")
    evaluate.set_defaults(func=cmd_eval)


def add_listing_commands(sub: argparse._SubParsersAction) -> None:
    """datasets, models, configs: what this installation has."""
    datasets = sub.add_parser("datasets", help="list datasets and whether each is available here")
    datasets.add_argument(
        "overrides", nargs="*", metavar="data_dir=DIR", help="look in DIR instead of the defaults"
    )
    datasets.add_argument("--data-dir", help="the same as data_dir=DIR")
    datasets.set_defaults(func=cmd_datasets)

    models = sub.add_parser("models", help="list registered model names")
    models.set_defaults(func=cmd_models)

    configs = sub.add_parser("configs", help="list shipped training presets")
    configs.set_defaults(func=cmd_configs)


def add_slurm_options(launch: argparse.ArgumentParser) -> None:
    """What a job asks SLURM for (`--launcher slurm`); the names of `SlurmOptions` in Python."""
    slurm = launch.add_argument_group("SLURM (--launcher slurm), checked with SLURM before queueing")
    slurm.add_argument("--partition", help="SLURM partition (default: the cluster's default)")
    slurm.add_argument("--gpus", type=int, default=1, help="GPUs per job, a DDP rank each; 0: CPUs")
    slurm.add_argument("--tasks", type=int, default=1, help="DDP ranks of one run on CPUs (with --gpus 0)")
    slurm.add_argument("--cpus", type=int, default=8, help="CPUs per rank (default 8)")
    slurm.add_argument("--mem", help="memory per node, SLURM's syntax: 16G, 4000M (default: the cluster's)")
    slurm.add_argument("--time", type=int, default=24 * 60, help="time limit in minutes (default 1440)")
    slurm.add_argument("--requeues", type=int, default=3, help="time-outs a job requeues after (default 3)")
    slurm.add_argument("--account", help="SLURM account to charge")
    slurm.add_argument("--qos", help="SLURM quality of service")
    slurm.add_argument(
        "--sbatch", action="append", metavar="KEY=VALUE", help="any other sbatch option, e.g. constraint=a100"
    )


def slurm_options(args: argparse.Namespace) -> dict:
    """The `SlurmOptions` fields the launch options give."""
    names = ("partition", "gpus", "tasks", "cpus", "mem", "requeues", "account", "qos", "sbatch")
    return {"time_minutes": args.time, **{name: getattr(args, name) for name in names}}


def add_experiment_commands(sub: argparse._SubParsersAction) -> None:
    """demo, reproduce, report, efficiency: runs by the grid, and their reports."""
    demo = sub.add_parser(
        "demo", help="compare random/mimetic/impulse ViTs, ConViT, DeiT and ConvMixer on digits"
    )
    demo.add_argument(
        "--out", type=Path, help="report directory (default reports/demo; with --quick reports/demo-quick)"
    )
    demo.add_argument(
        "--quick",
        action="store_true",
        help="10 epochs instead of 20, the ViTs and ConvMixer on 2x2-pixel patches (a minute on one core)",
    )
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--no-progress", action="store_true")
    demo.set_defaults(func=cmd_demo)

    launch = argparse.ArgumentParser(add_help=False)
    launch.add_argument("--out", type=Path, help="directory of the grid's runs (default under runs/)")
    launch.add_argument("--seeds", help="N (seeds 0..N-1) or a list 0,1,2 (default: the preset's)")
    launch.add_argument("--launcher", choices=("local", "slurm"), default="local")
    launch.add_argument("--jobs", type=int, default=1, help="local runs at once (subprocesses)")
    add_slurm_options(launch)
    launch.add_argument("--no-progress", action="store_true")

    reproduce = sub.add_parser(
        "reproduce", parents=[launch], help="run a paper experiment by name (resumable)"
    )
    reproduce.add_argument("name", nargs="?", help="experiment preset (see `convinit reproduce --list`)")
    reproduce.add_argument("--list", action="store_true", help="list the experiment presets")
    reproduce.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides applied to every run")
    reproduce.add_argument(
        "--row",
        action="append",
        metavar="LABEL",
        help="run only this row (its label, or its folder name under --out); repeat for several",
    )
    reproduce.add_argument("--scale", choices=("small", "full"), default="small")
    reproduce.add_argument("--dataset")
    reproduce.add_argument("--data-dir")
    reproduce.set_defaults(func=cmd_reproduce)

    report = sub.add_parser("report", help="paper-style table, CSV and plots for a directory of runs")
    report.add_argument("run_dir", type=Path, metavar="DIR")
    report.add_argument("--out", type=Path, help="where to write (default: DIR)")
    report.add_argument(
        "--reference", metavar="ROW", help="the row others are paired with, shown first (default: the first)"
    )
    report.set_defaults(func=cmd_report)

    add_results_parser(sub)

    add_efficiency_parser(sub, launch)
    add_vit_or_cnn_parser(sub)


def add_vit_or_cnn_parser(sub: argparse._SubParsersAction) -> None:
    """vit-or-cnn: the recommended ViT against the CNN of its size on one's data, with a verdict."""
    compare = sub.add_parser(
        "vit-or-cnn",
        help="ViT or CNN for my images? the recommended ViT against a ConvMixer of its size, with a verdict",
        epilog="example: convinit vit-or-cnn dataset=folder data_dir=photos --quick",
    )
    compare.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE",
        help="the data (dataset=folder data_dir=DIR; default: digits), model=timm:NAME for your own ViT, and "
        "keys both rows share (img_size=, hflip=, lr=)",
    )  # fmt: skip
    compare.add_argument(
        "--out", type=Path, help="the comparison's folder (default runs/vit-or-cnn); reruns continue"
    )
    compare.add_argument(
        "--quick", action="store_true", help="3 seeds, an eighth of the steps: a first answer"
    )
    compare.add_argument(
        "--seeds", help="N (seeds 0..N-1) or a list 0,1,2 (default: 5, or 3 above 5,000 images)"
    )
    compare.add_argument(
        "--epochs", type=int, help="epochs for both, never extended (default: from the data's size, doubled "
        "while a row still learns)"
    )  # fmt: skip
    compare.add_argument("--jobs", type=int, default=1, help="runs at once (subprocesses)")
    compare.add_argument("--no-progress", action="store_true")
    compare.set_defaults(func=cmd_vit_or_cnn)


def add_efficiency_parser(sub: argparse._SubParsersAction, launch: argparse.ArgumentParser) -> None:
    """efficiency: accuracy against the number of training images, per method, as a grid."""
    efficiency = sub.add_parser("efficiency", parents=[launch], help="accuracy vs number of training images")
    efficiency.add_argument(
        "--method",
        action="append",
        required=True,
        metavar="LABEL=PRESET [KEY=VALUE ...]",
        help='e.g. --method "impulse=default init=impulse model_args.qk_input=blend"',
    )
    efficiency.add_argument("--fractions", default="0.01,0.02,0.05,0.1,0.2,0.5,1")
    efficiency.add_argument(
        "--scale-epochs",
        action="store_true",
        help="scale each fraction's epochs so that every run takes as many optimisation steps as the whole "
        "set's (epochs x steps per epoch held equal, to the nearest epoch); a subset smaller than one batch "
        "then sees fewer images, its steps holding the whole subset",
    )
    efficiency.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="overrides applied to every run"
    )
    efficiency.set_defaults(func=cmd_efficiency)


def add_model_commands(sub: argparse._SubParsersAction) -> None:
    """export, predict, analyze: what a trained run gives."""
    export = sub.add_parser(
        "export", help="save a run's newest checkpoint as a model folder with a model card (and push it)"
    )
    export.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    export.add_argument("out", type=Path, metavar="DIR")
    export.add_argument("--push-to-hub", metavar="USER/NAME", help="also upload it to this Hub repository")
    export.set_defaults(func=cmd_export)

    predict = sub.add_parser(
        "predict", help="classify image files with a saved model, a Hub model user/name or a run directory"
    )
    predict.add_argument("model", metavar="MODEL", help="model folder, Hub name user/name, or RUN_DIR")
    predict.add_argument("images", nargs="+", metavar="IMAGE")
    predict.add_argument("--top", type=int, default=3, help="classes to print per image (default 3)")
    predict.set_defaults(func=cmd_predict)

    analyze = sub.add_parser("analyze", help="non-locality, gate and attention plots of a run")
    analyze.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    analyze.set_defaults(func=cmd_analyze)


def add_bench_command(sub: argparse._SubParsersAction) -> None:
    """bench: speed beside timm, the data pipelines and the init costs."""
    bench = sub.add_parser(
        "bench", help="training/inference speed beside timm, FLOP/s vs matmul rate, data pipeline, init costs"
    )
    bench.add_argument("--models", help="comma-separated (default: vit_tiny_patch2_32,convit_tiny_patch2_32,"
                       "simplevit,convmixer)")  # fmt: skip
    bench.add_argument("--batch-size", type=int, help="default: 16 on a CPU, 512 on a GPU")
    bench.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    bench.add_argument("--precision", default="fp32", help="fp32, bf16 or fp16 (autocast)")
    bench.add_argument("--compile", default="off", help="torch.compile the convinit models: off, on, both")
    bench.add_argument("--channels-last", action="store_true", help="ConvMixer in channels_last")
    bench.add_argument("--no-timm", action="store_true", help="skip the timm twins")
    bench.add_argument("--warmup", type=int, default=1, help="untimed calls per case (default 1)")
    bench.add_argument("--repeats", type=int, default=5, help="timed rounds; the median is reported")
    bench.add_argument("--no-pipeline", action="store_true", help="skip the data pipelines")
    bench.add_argument(
        "--stream-workers", default="0,2", help="worker counts for the streamed path ('' skips)"
    )
    bench.add_argument("--no-costs", action="store_true", help="skip impulse init and GPSA timings")
    bench.add_argument("--epoch", action="store_true", help="also one CIFAR-10-shaped epoch per model")
    bench.add_argument("--epoch-images", type=int, default=50_000, help="images in that epoch")
    bench.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    bench.add_argument("--out", type=Path, help="also write the JSON result to this file")
    bench.set_defaults(func=cmd_bench)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="convinit",
        description="Train Vision Transformers on small datasets with a convolutional inductive bias.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"convinit {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add_run_commands(sub)
    add_listing_commands(sub)
    add_experiment_commands(sub)
    add_model_commands(sub)
    add_bench_command(sub)
    return parser


# commands whose KEY=VALUE overrides are config keys, so `--epochs 3` can mean `epochs=3`
OVERRIDE_COMMANDS = ("train", "reproduce", "efficiency", "vit-or-cnn")


def key_options_as_overrides(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """`--epochs 3`, `--epochs=3` and `--warmup-epochs 2` as `epochs=3` ...: what a timm user types.

    Only for commands that take config overrides, and only for names that are config keys and not an
    option of the command (`train --seed 1` stays the option, which means the same). A key option with
    no value is `true` for a true/false key and refused with the key=value it needs otherwise.
    """
    from convinit.config import KEYS, TrainConfig

    if not argv or argv[0] not in OVERRIDE_COMMANDS:
        return argv
    options = command_options(parser, argv[0])
    flags = {k for k, v in TrainConfig.__annotations__.items() if v in ("bool", bool)}
    out, rest = [argv[0]], argv[1:]
    while rest:
        item = rest.pop(0)
        if item == "--":  # the end of options: what follows is key=value as written
            out += [item, *rest]
            break
        name, has_value, value = item[2:].partition("=")
        key = name.replace("-", "_")
        if not item.startswith("--") or item.split("=")[0] in options:
            out.append(item)
            continue
        if key.split(".")[0] not in KEYS:
            refuse_unknown_option(name, value if has_value else (rest[0] if rest else "..."), options)
            out.append(item)
            continue
        if not has_value:
            # the next word is the value unless it is an option or an override (`--teacher a=b` is one)
            if rest and not rest[0].startswith("--") and rest[0].split("=")[0].split(".")[0] not in KEYS:
                value = rest.pop(0)
            elif key in flags:
                value = "true"
            else:
                raise ConfigError(f"option --{name} needs a value; did you mean {key}=VALUE?")
        out.append(f"{key}={value}")
    return out


def refuse_unknown_option(name: str, value: str, options: set[str]) -> None:
    """`--epoch 3`: neither an option nor a key; refuse naming the key=value it most likely meant."""
    from convinit.config import KEYS
    from convinit.naming.did_you_mean import close_names

    keys = close_names(name.replace("-", "_"), KEYS, n=1)
    if keys and f"--{name}" not in options:
        raise ConfigError(f"unknown option --{name}; did you mean {keys[0]}={value}?")


def command_options(parser: argparse.ArgumentParser, command: str) -> set[str]:
    """The option strings (--out, -o, ...) a subcommand defines."""
    for action in parser._subparsers._group_actions:  # argparse keeps subcommands here, nowhere public
        if command in action.choices:
            return {o for a in action.choices[command]._actions for o in a.option_strings}
    return set()


def unrecognized(items: list[str]) -> str:
    """One line for arguments argparse did not take, with the key=value a stray name most likely meant."""
    from convinit.config import KEYS
    from convinit.naming.did_you_mean import close_names

    first = items[0]
    names = close_names(first.lstrip("-").split("=")[0].replace("-", "_"), KEYS, n=1)
    hint = f"; did you mean {names[0]}=...?" if names else "; overrides are written key=value (epochs=3)"
    return f"unrecognized argument{'s' if len(items) > 1 else ''} {' '.join(items)}{hint}"


SIGPIPE_EXIT = 128 + 13  # what a shell reports for a program that SIGPIPE ended (`yes | head`)


def closed_stdout() -> int:
    """The reader of stdout has gone (`convinit reproduce --list | head -1`): stop quietly, as the
    other command-line tools do, with stdout pointed at /dev/null so that Python's final flush is silent."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a file descriptor (a captured stdout)
        pass
    return SIGPIPE_EXIT


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        argv = key_options_as_overrides(list(sys.argv[1:] if argv is None else argv), parser)
    except ConfigError as exc:
        print(f"convinit: error: {exc}", file=sys.stderr)
        return 2
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may stand anywhere among the options (argparse only takes one positional run)
    stray = [item for item in extra if "=" not in item or item.startswith("-")]
    if stray or (extra and not hasattr(args, "overrides")):
        print(f"convinit: error: {unrecognized(stray or extra)}", file=sys.stderr)
        return 2
    if extra:
        args.overrides = list(args.overrides) + extra
    from convinit.config import drop_notes, say_notes

    formatwarning, warnings.formatwarning = warnings.formatwarning, one_line_warning
    try:
        code = args.func(args)
        say_notes()  # notes no validation said (a grid handed to SLURM)
        sys.stdout.flush()  # a reader that left (`| head`) shows here, not at interpreter exit
        return code
    except TrainingDiverged as exc:  # not bad input: the run itself failed
        print(f"convinit: error: {exc}", file=sys.stderr)
        return 3
    except ConvinitError as exc:
        drop_notes()  # a note about a refused config would only stand beside the error
        print(f"convinit: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return closed_stdout()
    except RuntimeError as exc:  # a torchvision built for another torch, imported where no check caught it
        if "torchvision::" not in str(exc):
            raise
        from convinit.system.torchvision_pair import pair_message

        print(f"convinit: error: {pair_message(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a folder that cannot be written (read-only, full disk, ulimit -f, ...)
        where = f" ({exc.filename})" if exc.filename else ""
        print(
            f"convinit: error: {exc.strerror or exc}{where}; free space or choose another place",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt as exc:  # RunInterrupted has saved a checkpoint; exit like the signal did
        return 128 + getattr(exc, "signum", 2)
    finally:
        warnings.formatwarning = formatwarning


if __name__ == "__main__":
    sys.exit(main())
