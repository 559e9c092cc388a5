"""`python -m convinit.speed ...` is `convinit bench ...` (run through the package's entry point, which
stands above this layer)."""

import runpy
import sys

if __name__ == "__main__":
    sys.argv = ["convinit", "bench", *sys.argv[1:]]
    runpy.run_module("convinit", run_name="__main__")
