"""CPU speed in the users' regime: the users'-ViT grid's models through the trainer's step, beside timm's
eager model of the same shape, eager and compiled, at 1 and 2 threads (table A); what GPSA and the blend
cost at the 7x7 and 14x14 grids, and their device ops and host waits on a pretend CUDA device (table B).
See `convinit.speed.users_vit` for what each figure is; BENCHMARKS.md quotes its output. Prints, never
asserts.

    python benchmarks/users_vit_speed.py                       # the default run: ~10 min on 2 cores
    python benchmarks/users_vit_speed.py --rows "users' ViT" "GPSA conversion" --threads 1 --no-compile
    python benchmarks/users_vit_speed.py --rows "recommended recipe, flushed" "recipe, 8 heads" \
        "recipe, 8 heads, kernel" "recipe, 16 heads" "recipe, 16 heads, kernel" --threads 1 --no-compile \
        --no-bias --repeats 7 --cpu-time           # more heads, with the small-head kernel
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from convinit.speed.users_vit import ROWS, UsersOptions, format_users, run_users_bench


def main() -> None:
    defaults = UsersOptions()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows",
        nargs="+",
        default=defaults.rows,
        choices=list(ROWS),
        metavar="ROW",
        help=f"rows to measure (default all): {'; '.join(ROWS)}",
    )
    parser.add_argument("--threads", nargs="+", type=int, default=defaults.threads)
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="eager rows only")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--vit-ti-batch-size", type=int, default=defaults.vit_ti_batch_size)
    parser.add_argument("--warmup", type=int, default=defaults.warmup)
    parser.add_argument("--repeats", type=int, default=defaults.repeats)
    parser.add_argument(
        "--no-bias", dest="bias", action="store_false", help="skip table B (14x14 grid, fake-CUDA counts)"
    )
    parser.add_argument(
        "--no-init",
        dest="initialize",
        action="store_false",
        help="skip the rows' init (impulse's fit): random weights, the same graph",
    )
    parser.add_argument(
        "--cpu-time", action="store_true", help="time by CPU time, not the wall clock (a shared machine)"
    )
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()  # fmt: skip
    options = UsersOptions(**{k: v for k, v in vars(args).items() if k != "json"})
    result = run_users_bench(options, say=lambda message: print(message, file=sys.stderr, flush=True))
    print(format_users(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
