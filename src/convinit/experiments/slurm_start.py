"""The first code a SLURM task runs: it holds SLURM's warning until the job can act on it.

SLURM's warning (USR2, `signal_delay_s` before the time limit, or a pre-emption's) may come while the
task's Python still imports torch and unpickles the job. Python's default action for USR2 ends the
process: the task died there, SLURM marked the job FAILED, and nothing was checkpointed or requeued.
This module holds the signal (`system.held_signals`) before anything heavy is imported, then runs
submitit's job as submitit's own command would; `TrainJob` delivers a held warning as soon as its
handler is in place.

submitit runs `<python> -u -m submitit.core._submit FOLDER`; `slurm_executor` sets <python> to
`python -u -m convinit.experiments.slurm_start`, so this module receives the rest of that line.
"""

from __future__ import annotations

import runpy
import sys

from convinit.experiments.slurm_options import preemption_signal
from convinit.system.held_signals import hold


def main(argv: list[str]) -> None:
    """Hold the warning, then run `[-u] -m MODULE ARGS...` (submitit's command line) as Python would."""
    hold(preemption_signal())
    if argv[:1] == ["-u"]:  # the interpreter already runs unbuffered (-u before this module)
        argv = argv[1:]
    if len(argv) < 2 or argv[0] != "-m":
        raise SystemExit(f"slurm_start runs `-m MODULE ARGS...` (submitit's command), not {argv}")
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
