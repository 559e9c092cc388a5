"""Serve `convinit` calls from forked copies of one process that imported torch once.

A documentation page runs dozens of `convinit` commands; each fresh interpreter would spend seconds
importing torch before doing a second of work. `serve(socket_path)` imports the CLI's heavy modules,
then for every request forks: the child takes the client's stdin/stdout/stderr (passed as file
descriptors), working directory and environment, runs `convinit.cli.main(argv)` and sends back its exit
code. The client is `command_client.py`, run by a `convinit` shim on the doc-test's PATH.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import traceback
from pathlib import Path

WARM_MODULES = (
    "torch",
    "convinit.cli",
    "convinit.train",
    "convinit.experiments.runner",
    "convinit.experiments.report",
    "convinit.experiments.efficiency",
    "convinit.models.registry",
    "convinit.share.predict",
    "convinit.share.export",
    "convinit.data.augmentation.batch_augment",
    "convinit.analysis.plots",
    "matplotlib.pyplot",
    "sklearn.datasets",
    "sklearn.model_selection",
)


def run_request(connection: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: become the client's process for one `convinit` call, then exit."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # grids wait for their own subprocesses
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    from convinit.cli import main

    small_fashion = os.environ.get("CONVINIT_DOC_TEST_FASHION_MNIST")
    if small_fashion:  # a preset's fashion-mnist too (not only dataset=fashion-mnist): its 1,000 / 300 copy
        from convinit.data.readers import idx

        idx.FASHION_DEBIAN_DIR = Path(small_fashion)

    try:
        code = main(request["argv"])
    except SystemExit as exc:  # --help, --version
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # a crash, shown as the real command would show it
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    connection.sendall(str(code).encode())
    os._exit(code)


def serve(socket_path: str) -> None:
    import importlib

    for module in WARM_MODULES:
        importlib.import_module(module)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(8)
    print("ready", flush=True)  # the test waits for this line before running any block
    while True:
        connection, _ = server.accept()
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        if os.fork() == 0:
            server.close()
            run_request(connection, json.loads(message), fds)
        for fd in fds:
            os.close(fd)
        connection.close()


if __name__ == "__main__":
    serve(sys.argv[1])
