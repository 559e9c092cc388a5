"""The `convinit` command: argument parsing only; each subcommand calls one library function.

User mistakes (a ConvinitError) end with one line `convinit: error: ...` and exit code 2, before any
training starts; a run whose loss diverges (TrainingDiverged) ends the same way with exit code 3.
Ctrl-C (SIGINT) or SIGTERM during training saves a checkpoint at the next step boundary and exits
with 130 or 143.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from convinit.errors import ConvinitError, TrainingDiverged

EXAMPLES = """examples:
  convinit train                                  # default preset: a small ViT on the embedded digits set
  convinit train --config default dataset=fashion-mnist train_fraction=0.05 epochs=5
  convinit train model_args.dim=128 lr=3e-3 --out runs/wide
  convinit train --resume runs/wide               # continue an interrupted run
  convinit eval runs/wide
"""


def cmd_train(args: argparse.Namespace) -> int:
    from convinit.config import resolve_config
    from convinit.train import train

    overrides = list(args.overrides)
    for flag, key in ((args.seed, "seed"), (args.device, "device")):
        if flag is not None:
            overrides.append(f"{key}={flag}")
    if args.deterministic:
        overrides.append("deterministic=true")
    if args.resume:
        cfg = resolve_config(args.config, overrides) if (args.config or overrides) else None
        run = train(cfg, run_dir=args.resume, resume=True, progress=not args.no_progress)
    else:
        cfg = resolve_config(args.config, overrides)
        run = train(cfg, run_dir=args.out, overwrite=args.overwrite, progress=not args.no_progress)
    final = run.metrics[-1]
    print(f"run {run.run_dir}: epoch {final['epoch']}, test accuracy {final['test_acc']:.2f}%")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from convinit.train import evaluate_run

    result = evaluate_run(args.run_dir, ema=args.ema, device=args.device)
    print(json.dumps(result, indent=1))
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    from convinit.data import dataset_info, list_datasets

    for name in list_datasets():
        info = dataset_info(name)
        missing = info.missing_files(args.data_dir)
        where = info.resolve_dir(args.data_dir)
        status = "available" if not missing else "not found"
        place = where if where else ("(set --data-dir)" if info.needs_dir else "(embedded)")
        print(f"{name:15s} {status:10s} {place}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from convinit.models import list_models

    print("\n".join(list_models()))
    return 0


def cmd_configs(args: argparse.Namespace) -> int:
    from convinit.config import preset_names

    print("\n".join(preset_names()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convinit",
        description="Train Vision Transformers on small datasets with a convolutional inductive bias.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
        "--config", "-c", help="preset name (`convinit configs`) or a YAML file; default: default"
    )
    train.add_argument(
        "--out", "-o", type=Path, help="run directory (default: runs/<model>-<dataset>-s<seed>-<time>)"
    )
    train.add_argument(
        "--resume", type=Path, metavar="RUN_DIR", help="continue RUN_DIR from its newest checkpoint"
    )
    train.add_argument("--overwrite", action="store_true", help="replace a finished run in --out")
    train.add_argument("--seed", type=int, help="random seed (same as seed=N)")
    train.add_argument(
        "--deterministic", action="store_true", help="deterministic algorithms (bit-exact resume on CPU)"
    )
    train.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: auto)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.set_defaults(func=cmd_train)

    evaluate = sub.add_parser("eval", help="test accuracy of a run's newest checkpoint")
    evaluate.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    evaluate.add_argument("--ema", action="store_true", help="evaluate the EMA weights")
    evaluate.add_argument("--device", default="auto")
    evaluate.set_defaults(func=cmd_eval)

    datasets = sub.add_parser("datasets", help="list datasets and whether each is available here")
    datasets.add_argument("--data-dir", help="look in this directory instead of the defaults")
    datasets.set_defaults(func=cmd_datasets)

    models = sub.add_parser("models", help="list registered model names")
    models.set_defaults(func=cmd_models)

    configs = sub.add_parser("configs", help="list shipped training presets")
    configs.set_defaults(func=cmd_configs)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except TrainingDiverged as exc:  # not bad input: the run itself failed
        print(f"convinit: error: {exc}", file=sys.stderr)
        return 3
    except ConvinitError as exc:
        print(f"convinit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # RunInterrupted has saved a checkpoint; exit like the signal did
        return 128 + getattr(exc, "signum", 2)


if __name__ == "__main__":
    sys.exit(main())
