"""The one error type users see.

Everything a user can get wrong (a config key, a dataset path, a model shape) raises `ConvinitError`
with a one-line message that says what is wrong and how to fix it. The CLI prints that line and exits
with code 2; library users catch it like any other exception.
"""


class ConvinitError(Exception):
    """A user-facing error: one line, what is wrong and how to fix it."""


class ConfigError(ConvinitError, ValueError):
    """A configuration key, type or value is invalid."""


class DataError(ConvinitError, OSError):
    """A dataset is missing, corrupt or cannot be read."""


class TrainingDiverged(ConvinitError):
    """The loss or the gradients became non-finite (NaN/inf) during training."""


class InstallError(ConvinitError):
    """Installed packages that cannot work together (torchvision built for another torch release)."""
