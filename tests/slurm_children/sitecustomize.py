"""Pauses inside SLURM jobs' training, in chosen attempts only, so a test can signal a job exactly there.

A test helper, not a test (see tests/slurm_cluster.py): a job's Python started with this folder first on
PYTHONPATH applies pausing_train.py's options from PAUSING_CHILDREN (`--pause-at-step 11`) when its
attempt (SLURM_RESTART_COUNT, 0 for the first) is one of PAUSING_ATTEMPTS, and writes
`<PAUSING_CHILDREN_MARKERS>/<pid>` when it reaches the pause.
"""

import os
import sys
from pathlib import Path

attempt = os.environ.get("SLURM_RESTART_COUNT", "0")
if os.environ.get("PAUSING_CHILDREN") and attempt in os.environ.get("PAUSING_ATTEMPTS", "0").split(","):
    sys.path.insert(0, str(Path(__file__).parents[1] / "reliability"))
    import pausing_train

    options = pausing_train.parser().parse_args(os.environ["PAUSING_CHILDREN"].split())
    options.marker = Path(os.environ["PAUSING_CHILDREN_MARKERS"]) / str(os.getpid())
    pausing_train.install(options)
