"""The papers' experiments: named grids and their runner (resumable, --jobs, SLURM), reports with paired
differences, data-efficiency curves, the demo and its attention figures."""
