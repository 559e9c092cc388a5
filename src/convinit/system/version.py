"""convinit's version, in the ground floor so that run records (`convinit.runs.provenance`) can name it
without importing the package root, which imports every layer."""

VERSION = "0.1.0"  # pyproject.toml's `version`
