"""CUDA's device rules on a CPU-only machine, and an audit of every host-device transfer: what the GPU-path
test suite (tests/gpu_path/) checks each recipe's step with, and what the users'-regime benchmark
(`speed.users_vit`) counts device ops and host waits per step with.

`fake_cuda()` enters torch's `FakeTensorMode`: tensors carry shapes, dtypes and a (fake) device but no
data, so `device="cuda"` works without a GPU and every op checks CUDA's device rules (a CPU tensor beside
a CUDA one raises, as on a GPU). bf16 autocast on `cuda` is let through, as on a GPU, and the device
reports an H200's memory (`mem_get_info`), which the data path sizes datasets by. Host work stays
real: an op on real CPU tensors only (a dataset read, a `randperm` for the epoch order, a model built on
the CPU) runs for real, so its values exist; only what is on, or goes to, the device is fake.

`DeviceAudit` is a `TorchDispatchMode` entered inside it; it records, with the call site, each op that
makes a GPU wait or would fail there:

- `h2d`: a blocking host-to-device copy (`torch.tensor(x, device=cuda)`, `t.new_tensor(i)`,
  `torch.ones(()).to(cuda)`, `cuda.copy_(cpu)`, CPU indices into a CUDA tensor). A pageable copy is
  synchronous: the host waits until the queue drains, like a read.
- `read`: a device-to-host read (`item()`, `bool(t)`/`if t`, `int(t)`, `tolist()`, `.cpu()`,
  `torch.equal`, `nonzero` and every op whose output shape depends on values).
- `mismatch`: an op that mixes CPU and CUDA tensors where CUDA refuses it (FakeTensorMode lets a CPU
  0-dim tensor into any op; CUDA only into element-wise ones).
- `h2d_async`: a `non_blocking=True` host-to-device copy (from pinned memory it overlaps with compute);
  recorded, not a failure.

Reads are answered with a one of the right type (a zero would divide) so that one pass finds every
read of a step.

The one piece that cannot run on a pretend device is autograd's engine: on a machine without a GPU it
stops at its stream bookkeeping (`hasPrimaryContext`) before any op. Inside `fake_cuda()`,
`Tensor.backward` therefore gives each leaf its gradient as a device tensor of the leaf's shape, as the
engine would, without running the derivative formulas: those are torch's, with the forward's devices,
and `test_backward_reads_nothing` runs them for real on the CPU.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    unset_fake_temporarily,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

CUDA = torch.device("cuda", 0)
TOTAL_BYTES, FREE_BYTES = 141 << 30, 140 << 30  # the pretend device's memory (an H200's), for data sizing
TORCH_DIR = str(Path(torch.__file__).parent)
THIS_FILE = str(Path(__file__))

# ops that hand a device value to the host (their output is a Python value or data-dependent in shape)
READ_OPS = {"_local_scalar_dense", "is_nonzero", "equal", "item", "nonzero", "nonzero_static"}
# ops CUDA runs with a CPU 0-dim tensor as a kernel argument (TensorIterator's CPU scalars)
SCALAR_FRIENDLY = {"fill", "fill_", "masked_fill", "masked_fill_", "index_fill", "index_fill_"}
INDEX_OPS = {"index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index", "_unsafe_index_put"}
IGNORED = {"device", "lift_fresh", "lift_fresh_copy", "detach", "alias"}


@dataclass(frozen=True)
class Transfer:
    kind: str  # h2d, h2d_async, read, mismatch
    op: str
    site: str  # file:line function, the innermost frame outside torch

    def __str__(self) -> str:
        return f"{self.kind} {self.op} at {self.site}"


def call_site() -> str:
    """The innermost stack frame outside torch and this file: the line that asked for the op."""
    for frame in reversed(traceback.extract_stack()):
        if frame.filename.startswith(TORCH_DIR) or frame.filename == THIS_FILE:
            continue
        if "/contextlib.py" in frame.filename or "/unittest/mock.py" in frame.filename:
            continue
        return f"{shorten(frame.filename)}:{frame.lineno} {frame.name}"
    return "?"


def shorten(filename: str) -> str:
    """The path from the innermost known folder on: `convinit/train/step.py`, `tests/gpu_path/x.py`
    (the innermost, so that a checkout folder itself named `convinit` does not prefix a test's path)."""
    parts = Path(filename).parts
    anchors = ("convinit", "tests", "benchmarks", "timm", "torchvision")
    found = [i for i, part in enumerate(parts) if part in anchors]
    return "/".join(parts[found[-1] :]) if found else filename


def tensors_in(args, kwargs) -> list[torch.Tensor]:
    flat, _ = tree_flatten((args, kwargs))
    return [t for t in flat if isinstance(t, torch.Tensor)]


def is_fake(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, FakeTensor)


class HostStaysReal(TorchDispatchMode):
    """Below the audit, above FakeTensorMode: ops that touch no fake tensor and make nothing on the
    device run for real, outside the fake mode; reads of fake values are answered with a zero."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = kwargs.get("device")
        if not any(map(is_fake, tensors_in(args, kwargs))) and (
            target is None or torch.device(target).type == "cpu"
        ):
            with unset_fake_temporarily():
                return func(*args, **kwargs)
        if func.overloadpacket.__name__ in READ_OPS:
            return answer_read(func, args)
        return func(*args, **kwargs)


class DeviceAudit(TorchDispatchMode):
    """Records every blocking host-to-device copy, device-to-host read and device mismatch (with its
    call site) of the ops run while it is active. Enter it inside `fake_cuda()`."""

    def __init__(self) -> None:
        super().__init__()
        self.transfers: list[Transfer] = []

    def of(self, *kinds: str) -> list[Transfer]:
        return [t for t in self.transfers if t.kind in kinds]

    @property
    def blocking(self) -> list[Transfer]:
        """What makes the host wait for the GPU: reads and blocking copies (and mismatches, which fail)."""
        return self.of("h2d", "read", "mismatch")

    def clear(self) -> None:
        self.transfers.clear()

    def record(self, kind: str, func) -> None:
        self.transfers.append(Transfer(kind, func.overloadpacket.__name__, call_site()))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in IGNORED:
            return func(*args, **kwargs)
        if name in READ_OPS:
            if args and isinstance(args[0], torch.Tensor) and args[0].device.type == "cuda":
                self.record("read", func)
            return func(*args, **kwargs)
        self.classify(func, name, args, kwargs)
        try:
            return func(*args, **kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException):
            self.record("read", func)  # e.g. a boolean mask index: its size is read back
            raise

    def classify(self, func, name: str, args, kwargs) -> None:
        if name == "_to_copy":
            source, target = args[0].device, kwargs.get("device") or args[0].device
            self.copy(func, source, torch.device(target), kwargs.get("non_blocking", False))
        elif name == "copy_":
            non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
            self.copy(func, args[1].device, args[0].device, non_blocking)
        else:
            self.mixed(func, name, tensors_in(args, kwargs))

    def copy(self, func, source: torch.device, target: torch.device, non_blocking: bool) -> None:
        if source.type == "cpu" and target.type == "cuda":
            self.record("h2d_async" if non_blocking else "h2d", func)
        elif source.type == "cuda" and target.type == "cpu":
            self.record("read", func)

    def mixed(self, func, name: str, tensors: list[torch.Tensor]) -> None:
        if not any(t.device.type == "cuda" for t in tensors):
            return
        host = [t for t in tensors if t.device.type == "cpu"]
        if not host:
            return
        if name in INDEX_OPS:
            self.record("h2d", func)  # CUDA copies CPU indices to the device first
        elif all(t.dim() == 0 for t in host) and (
            torch.Tag.pointwise in func.tags or name in SCALAR_FRIENDLY or name.startswith("_foreach_")
        ):
            return  # a CPU scalar passed by value to the kernel
        else:
            self.record("mismatch", func)


def answer_read(func, args):
    """A stand-in for the value a read would return: one (True), or an empty result."""
    name = func.overloadpacket.__name__
    if name in ("nonzero", "nonzero_static"):
        return torch.empty((0, args[0].dim()), dtype=torch.long, device=args[0].device)
    if name in ("is_nonzero", "equal") or args[0].dtype == torch.bool:
        return True
    return 1.0 if args[0].dtype.is_floating_point or args[0].dtype.is_complex else 1


ORIGINAL_BACKWARD = torch.Tensor.backward


def fake_tolist(self: torch.Tensor) -> list:
    """torch's `tolist` copies the tensor to the host once (FakeTensor's reads each element): one read."""
    self.cpu()
    with unset_fake_temporarily():
        return torch.ones(self.shape, dtype=self.dtype).tolist()


def graph_leaves(root: torch.Tensor) -> list[torch.Tensor]:
    """The leaves (parameters, inputs with requires_grad) that `root.backward()` would give a gradient."""
    leaves, seen, stack = [], set(), [root.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):  # AccumulateGrad
            leaves.append(node.variable)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return leaves


def fake_backward(self: torch.Tensor, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """`Tensor.backward` on fake tensors: each leaf's `.grad` becomes (or stays) a tensor on its device."""
    if not is_fake(self):  # host work (an init fitted on the CPU) runs torch's backward
        return ORIGINAL_BACKWARD(self, gradient, retain_graph, create_graph, inputs)
    if self.grad_fn is None:
        raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
    for leaf in inputs if inputs is not None else graph_leaves(self):
        if leaf.grad is None:
            leaf.grad = torch.zeros_like(leaf)


ORIGINAL_APPLY = torch.nn.Module._apply


def rebinding_apply(self: torch.nn.Module, fn, recurse: bool = True) -> torch.nn.Module:
    """`Module._apply` (what `.to(device)` runs) for a module built inside the fake mode: torch swaps a
    fake parameter in place, which the mode's own weak references forbid, so each parameter is rebound
    to a new one (shared parameters stay shared) and each buffer replaced."""
    if not any(isinstance(t, FakeTensor) for t in itertools.chain(self.parameters(), self.buffers())):
        return ORIGINAL_APPLY(self, fn, recurse)
    rebound: dict[int, torch.nn.Parameter] = {}
    for module in self.modules() if recurse else [self]:
        for key, param in module._parameters.items():
            if param is not None and id(param) not in rebound:
                with torch.no_grad():
                    rebound[id(param)] = torch.nn.Parameter(fn(param), requires_grad=param.requires_grad)
            if param is not None:
                module._parameters[key] = rebound[id(param)]
        for key, buffer in module._buffers.items():
            if buffer is not None:
                module._buffers[key] = fn(buffer)
    return self


@contextmanager
def fake_cuda() -> Iterator[FakeTensorMode]:
    """FakeTensorMode on a pretend CUDA device, with bf16 autocast on `cuda` allowed as on a GPU.
    Real CPU tensors made outside (a dataset, a module built before) are accepted and become fake."""
    with ExitStack() as stack:
        stack.enter_context(mock.patch("torch.cuda.amp.common.amp_definitely_not_available", lambda: False))
        stack.enter_context(mock.patch("torch.cuda.is_bf16_supported", lambda *a, **k: True))
        stack.enter_context(mock.patch("torch.cuda.mem_get_info", lambda *a, **k: (FREE_BYTES, TOTAL_BYTES)))
        stack.enter_context(mock.patch.object(torch.Tensor, "backward", fake_backward))
        stack.enter_context(mock.patch.object(torch.nn.Module, "_apply", rebinding_apply))
        stack.enter_context(mock.patch.object(FakeTensor, "tolist", fake_tolist))
        mode = stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        stack.enter_context(HostStaysReal())
        yield mode


@contextmanager
def audit() -> Iterator[DeviceAudit]:
    """Records transfers of the ops inside; use within `fake_cuda()`."""
    with DeviceAudit() as recorder:
        yield recorder


def describe(transfers: list[Transfer]) -> str:
    """One line per distinct transfer with its count, for assertion messages."""
    counts: dict[str, int] = {}
    for transfer in transfers:
        counts[str(transfer)] = counts.get(str(transfer), 0) + 1
    return "\n".join(f"{n} x {line}" for line, n in counts.items()) or "none"


class DeviceOpCount(TorchDispatchMode):
    """Counts the aten ops that run on the device (a CUDA tensor in or out, or made on CUDA): on a GPU
    each is a kernel launched from Python, or a view that costs the host as much. Enter it inside
    `fake_cuda()`; host ops (a CPU draw, an epoch order) are not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: dict[str, int] = {}

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in IGNORED:  # metadata, no work
            return out
        target = kwargs.get("device")
        on_device = target is not None and torch.device(target).type == "cuda"
        if on_device or any(t.device.type == "cuda" for t in tensors_in((args, kwargs), out)):
            self.ops[name] = self.ops.get(name, 0) + 1
        return out
