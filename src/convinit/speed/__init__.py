"""Speed as a measured property: convinit's models beside timm's, FLOP/s against the machine's matmul
rate, the data pipeline, impulse initialisation and GPSA's positional attention (`convinit bench`)."""

from convinit.speed.run import BenchOptions, run_bench

__all__ = ["BenchOptions", "run_bench"]
