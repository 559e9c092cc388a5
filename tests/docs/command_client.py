"""The `convinit` the doc-test puts on PATH: shrink the command, have the server run it, exit with its code.

Run with `python -I -S` (standard library only, no site): it starts in milliseconds. The shrinking
rules (SHRINK) make a documented command do the same thing on less: one epoch on a few images per
class (--scale-epochs dropped), one seed, a grid's runs on 5 % of the data, the first two data
fractions, a one-round benchmark (the server reads Fashion-MNIST from a 1,000 / 300-image copy). They
append or replace arguments, so every key, option and preset the docs name is still parsed and checked.
"""

from __future__ import annotations

import json
import os
import socket
import sys

SHRINK = {
    # appended to every training command; later overrides win over the documented ones
    "train": ["epochs=1", "eval_every=0", "per_class=4"],
    "reproduce": ["epochs=1", "eval_every=0", "train_fraction=0.05"],  # wins over a row's own fraction
    "efficiency": ["epochs=1", "eval_every=0"],  # it sets train_fraction itself
    "vit-or-cnn": ["--epochs", "1", "per_class=4"],  # the last --epochs wins; 4 images of each class
    "bench": ["--models", "simplevit", "--repeats", "1", "--warmup", "0", "--batch-size", "4", "--no-timm",
              "--no-pipeline", "--no-costs", "--stream-workers="],
}  # fmt: skip


def shrink(argv: list[str]) -> list[str]:
    """The documented command, made small (see SHRINK)."""
    if not argv or argv[0] not in SHRINK or "--resume" in argv or "--list" in argv:
        return argv
    out = []
    items = iter(argv)
    for item in items:
        if item in ("--seeds", "--jobs"):  # one seed, one process
            out += [item, "1"]
            next(items, None)
        elif item == "--fractions":  # the two smallest sizes
            out += [item, ",".join(next(items, "1").split(",")[:2])]
        elif (argv[0] == "train" and item.startswith("per_class=")) or item == "--scale-epochs":
            continue  # ours replaces it; scaled epochs would undo epochs=1
        else:
            out.append(item)
    grids = ("reproduce", "efficiency", "vit-or-cnn")
    if argv[0] in grids and not any(a.split("=")[0] == "--seeds" for a in argv):
        out += ["--seeds", "1"]  # a grid's own seeds (3 for most): one seed runs every row
    if argv[0] == "train" and any(item.startswith("train_fraction=") for item in argv):
        return out + [o for o in SHRINK["train"] if not o.startswith("per_class=")]
    return out + SHRINK[argv[0]]


def main() -> int:
    socket_path, argv = sys.argv[1], shrink(sys.argv[2:])
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(socket_path)
        socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
        connection.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := connection.recv(64):
            reply += chunk
    return int(reply or b"1")  # no reply: the child died without exiting cleanly


if __name__ == "__main__":
    sys.exit(main())
