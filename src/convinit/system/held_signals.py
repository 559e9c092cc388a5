"""A signal held until the handler that should act on it is in place.

A process that starts by importing heavy libraries cannot act on a signal yet, and the default action of
many (USR1, USR2) ends it. `hold` notes such a signal instead; `deliver_held` sends it again once the
real handler is installed, so it is acted on late rather than lost or fatal.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

HELD: list[int] = []  # the held signals, in the order they came


def hold(sig: signal.Signals) -> None:
    """From now on, note `sig` instead of acting on it."""

    def note(signum: int, frame: FrameType | None) -> None:
        HELD.append(signum)

    signal.signal(sig, note)


def deliver_held() -> bool:
    """Send this process the first held signal again (once), now that its handler is in place; whether
    one was held."""
    if not HELD:
        return False
    signum = HELD[0]
    HELD.clear()
    os.kill(os.getpid(), signum)
    return True
