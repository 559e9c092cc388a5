"""A run folder's files: layout and refusals, ownership, checkpoints, metrics, the tracker log, signals,
provenance and the preprocessing record (what the run's model takes as input)."""
