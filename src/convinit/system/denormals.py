"""Subnormal floats on the CPU, flushed to zero while convinit computes there.

A softmax as peaked as impulse init makes it leaves most attention weights below float32's smallest
normal number (1.2e-38). Some x86 CPUs compute with such subnormal operands in microcode, many times
slower per operation: a user measured a 28 px run at 2 px patches train 2-2.7x slower with impulse init
than with random init, and at random's speed with them flushed; on the AMD EPYC of BENCHMARKS.md ("Impulse
init on a CPU: subnormal floats") there is no such penalty. Flushing (`torch.set_flush_denormal`: FTZ and
DAZ) changes only values below 1.2e-38, which round to nothing beside any normal number they are added to,
but a run's later bits can differ from an unflushed one's (the training key `flush_denormal`).

`torch.set_flush_denormal` sets the control register of the calling thread only, and torch's intra-op
threads are OpenMP's, started before a run begins: each one is set inside one OpenMP parallel region
(`GOMP_parallel`, which GNU's libgomp and LLVM's libomp both provide) whose body runs on every thread of
the team. Threads started later copy the setting of the thread that starts them.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

SMALLEST_SUBNORMAL_BITS = 1  # the float32 whose bit pattern is 1: 1.4e-45, built without arithmetic
GRAIN = 32768  # elements ATen gives one thread of an element-wise operation at least (at::internal)
REGION_BODY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def flushes_denormals() -> bool:
    """Whether the calling thread flushes subnormal floats to zero now (torch has no getter: a
    one-element product, computed on this thread, tells)."""
    tiny = torch.tensor([SMALLEST_SUBNORMAL_BITS], dtype=torch.int32).view(torch.float32)
    return float(tiny * 2.0) == 0.0


def flushes_in_every_thread() -> bool:
    """Whether every intra-op thread flushes: a product of subnormals large enough that each thread
    computes a share of it comes out all zero."""
    count = 2 * GRAIN * max(torch.get_num_threads(), 1)
    tiny = torch.full((count,), SMALLEST_SUBNORMAL_BITS, dtype=torch.int32).view(torch.float32)
    return not bool((tiny * 2.0).any())


def on_every_thread(action: Callable[[], object]) -> bool:
    """Run `action` on each thread of torch's intra-op team (this one included); False where no OpenMP
    runtime with `GOMP_parallel` is loaded (it then ran on this thread only)."""
    if torch.get_num_threads() == 1:
        action()
        return True
    try:
        region = ctypes.CDLL(None).GOMP_parallel
    except (OSError, AttributeError, TypeError):  # no such runtime, or no process-wide symbol lookup
        action()
        return False
    region.argtypes = [REGION_BODY, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
    region.restype = None
    body = REGION_BODY(lambda _: action())  # kept referenced until the region has returned
    region(body, None, torch.get_num_threads(), 0)
    return True


def set_flush_denormal_everywhere(on: bool) -> bool:
    """`torch.set_flush_denormal(on)` on this thread and every intra-op thread; False where the CPU
    cannot flush (nothing changed then)."""
    supported = torch.set_flush_denormal(on)
    if supported:
        on_every_thread(lambda: torch.set_flush_denormal(on))
    return supported


@contextmanager
def denormals_flushed(enabled: bool = True) -> Iterator[bool]:
    """Flush subnormal floats to zero in every intra-op thread for the duration, then put back the
    calling thread's previous setting everywhere; yields whether flushing is on."""
    if not enabled:
        yield False
        return
    previous = flushes_denormals()
    supported = set_flush_denormal_everywhere(True)
    try:
        yield supported
    finally:
        if supported:
            set_flush_denormal_everywhere(previous)
