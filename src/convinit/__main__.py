"""`python -m convinit` is the `convinit` command (also what torchrun launches)."""

import sys

from convinit.cli import main

sys.exit(main())
