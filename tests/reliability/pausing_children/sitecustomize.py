"""Pauses inside the `convinit train` children of a grid, so a test can signal the grid exactly there.

A test helper, not a test: a grid starts its children as `python -m convinit train ...`, which no
wrapper script can reach, so a test puts this folder first on the grid's PYTHONPATH and sets
PAUSING_CHILDREN to pausing_train.py's options (`--pause-at-step 5`) and PAUSING_CHILDREN_MARKERS to a
folder: every Python process started so then applies those pauses, and one that reaches its pause
writes `<folder>/<pid>` and waits for a signal (see pausing_train.py).
"""

import os
import sys
from pathlib import Path

if os.environ.get("PAUSING_CHILDREN"):
    sys.path.insert(0, str(Path(__file__).parent.parent))
    import pausing_train

    options = pausing_train.parser().parse_args(os.environ["PAUSING_CHILDREN"].split())
    options.marker = Path(os.environ["PAUSING_CHILDREN_MARKERS"]) / str(os.getpid())
    pausing_train.install(options)
