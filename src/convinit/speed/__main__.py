"""`python -m convinit.speed ...` is `convinit bench ...`."""

import sys

from convinit.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
