"""A run folder's life: layout, ownership, atomic files, checkpoints, metrics, signals, loggers,
provenance and the preprocessing record."""
