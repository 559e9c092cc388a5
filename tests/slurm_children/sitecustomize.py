"""Pauses inside SLURM jobs' training, in chosen attempts only, so a test can signal a job exactly there.

A test helper, not a test (see tests/slurm_cluster.py): a job's Python started with this folder first on
PYTHONPATH applies pausing_train.py's options from PAUSING_CHILDREN (`--pause-at-step 11`) when its
attempt (SLURM_RESTART_COUNT, 0 for the first) is one of PAUSING_ATTEMPTS, and writes
`<PAUSING_CHILDREN_MARKERS>/<pid>` when it reaches the pause. It imports torch before the job's own first
line runs, so it first holds SLURM's warning as that line would.

With PAUSING_BEFORE_TORCH=<markers> a first attempt instead pauses just before it first imports torch,
writing `<markers>/<pid>`, until a signal comes; it holds nothing itself, so a warning sent there finds only
what the job's own start put in place.
"""

import importlib.abc
import os
import signal
import sys
from pathlib import Path

attempt = os.environ.get("SLURM_RESTART_COUNT", "0")
if os.environ.get("PAUSING_CHILDREN") and attempt in os.environ.get("PAUSING_ATTEMPTS", "0").split(","):
    # this runs before the job's first line (slurm_start) and imports torch: hold SLURM's warning first,
    # as slurm_start does, or a warning during the import would end the task as it did before slurm_start
    from convinit.experiments.slurm_options import preemption_signal
    from convinit.system.held_signals import hold

    hold(preemption_signal())
    sys.path.insert(0, str(Path(__file__).parents[1] / "reliability"))
    import pausing_train

    options = pausing_train.parser().parse_args(os.environ["PAUSING_CHILDREN"].split())
    options.marker = Path(os.environ["PAUSING_CHILDREN_MARKERS"]) / str(os.getpid())
    pausing_train.install(options)


class PauseBeforeTorch(importlib.abc.MetaPathFinder):
    """Pauses the first import of torch (once) until a signal comes."""

    def __init__(self, marker: Path):
        self.marker = marker

    def find_spec(self, name, path, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            self.marker.write_text(str(os.getpid()))
            signal.pause()
        return None


if os.environ.get("PAUSING_BEFORE_TORCH") and attempt == "0":
    sys.meta_path.insert(0, PauseBeforeTorch(Path(os.environ["PAUSING_BEFORE_TORCH"]) / str(os.getpid())))
