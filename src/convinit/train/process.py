"""This process, set up for a run: its device and number formats, its random generators, its thread count
and its rank under torchrun; what `convinit.train.opening.begin` sets before any data is read.

Device and number formats: device names, autocast precision, memory layout, the CUDA math modes, and
the one-line explanation of a torch.compile failure.

Random generators: every generator a run draws from is seeded at the start, saved in each checkpoint and
restored on resume, so a resumed run draws what an uninterrupted one would.

Threads: how many threads a run computes with, chosen once, from the settings and the machine, never
from torch's default, and said in one line beside the data path.

torch's default (one thread per physical core) is right for one process on an idle machine and badly wrong
otherwise: several grid runs, DataLoader workers, or other programs on the same cores make its threads wait
for each other at every parallel region: on a busy 2-core machine one step of the default preset took 8x
longer with 2 threads than with 1 (BENCHMARKS.md, "Threads on a busy machine"). The rule, first match wins:

1. `threads=N` in the config;
2. `OMP_NUM_THREADS` when the user set it;
3. on `--resume`, the count the run started with (recorded in `threads.json`), so that its floating-point
   sums are ordered as before and the resumed run is bit-identical (docs/reliability.md);
4. otherwise from the cores this process may use (its CPU affinity, capped by a cgroup CPU quota): all but
   one, which is left to everything else on the machine; in a `--jobs N` grid or under torchrun with
   `LOCAL_WORLD_SIZE` ranks on this machine an equal share, cores // (N x ranks); less one core per
   DataLoader worker (each worker computes with one thread, as torch sets it); at least 1.

Each rank chooses its own count, prints it and records it (`threads.json` for rank 0,
`threads-rank<R>.json` for the others), beside its decoding workers.

The same settings on the same machine give the same count; a resume that cannot use the recorded count
says it will not be bit-identical.

Ranks: DistributedDataParallel under torchrun. `torchrun --nproc_per_node N -m convinit train ...` sets
RANK/WORLD_SIZE/LOCAL_RANK; the trainer then starts a process group (nccl on GPUs, gloo on the CPU), gives
each rank its shard of the device-resident data and a batch of batch_size / N, and lets rank 0 alone
write metrics, checkpoints and progress.
"""

from __future__ import annotations

import json
import os
import random
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from convinit.config import TrainConfig
from convinit.config.train_config import MAX_THREADS
from convinit.data.cores import local_ranks, positive_int, usable_cores
from convinit.errors import ConfigError
from convinit.system.atomic import atomic_write_text
from convinit.system.read_back import read_capped, short_repr

# --- device and number formats ---


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} asked for but CUDA is not available here; use device=cpu or auto")
    if name.startswith("mps") and not torch.backends.mps.is_available():
        raise ConfigError(f"device {name!r} asked for but MPS is not available here; use device=cpu or auto")
    try:
        device = torch.device(name)
    except RuntimeError as exc:  # e.g. cuda:x
        raise ConfigError(
            f"device {name!r} is not a device name; use auto, cpu, cuda, cuda:N or mps"
        ) from exc
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ConfigError(
            f"device {name!r} asked for but there are {count} CUDA devices (cuda:0 .. cuda:{count - 1})"
        )
    return device


def autocast_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, None for full precision: `auto` is bf16 on CUDA and fp32 elsewhere; bf16 and
    fp16 are used on any device (fp16 needs a GradScaler, see `train`); fp32 and tf32 are not autocast
    (tf32: fp32 tensors, TF32 tensor-core matmuls on CUDA, see `configure_cuda_math`)."""
    if cfg.precision == "fp16":
        return torch.float16
    if cfg.precision == "bf16" or (cfg.precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def configure_cuda_math(cfg: TrainConfig, device: torch.device, backends: Any = torch.backends) -> None:
    """On CUDA: TF32 tensor cores for the fp32 matmuls and convolutions (the ones autocast leaves in fp32,
    or all of them with `precision=tf32`) and cudnn.benchmark, which times the convolution algorithms
    once per input shape (a run's shapes are fixed) and keeps the fastest; `deterministic=true` keeps
    cudnn's default choice. `precision=fp32` keeps strict IEEE fp32 everywhere: the reference.
    `backends` is `torch.backends` (a stand-in in tests)."""
    if device.type != "cuda":
        return
    set_tf32(backends, cfg.precision != "fp32")
    backends.cudnn.benchmark = not cfg.deterministic


def set_tf32(backends: Any, enabled: bool) -> None:
    """TF32 on or off for fp32 matmuls and convolutions, with whichever API this torch has:
    `fp32_precision` (torch 2.9 and later, which deprecates the old flags) or the `allow_tf32` flags."""
    matmul = backends.cuda.matmul
    if hasattr(matmul, "fp32_precision") and hasattr(backends.cudnn, "conv"):
        matmul.fp32_precision = backends.cudnn.conv.fp32_precision = "tf32" if enabled else "ieee"
    else:
        matmul.allow_tf32 = backends.cudnn.allow_tf32 = enabled


def memory_format(cfg: TrainConfig) -> torch.memory_format:
    """channels_last stores a (B, C, H, W) batch as (B, H, W, C), the layout fast convolution kernels
    want (ConvMixer); the weights of a ViT are mostly 2-D and unaffected."""
    return torch.channels_last if cfg.channels_last else torch.contiguous_format


@contextmanager
def explain_compile_failure(enabled: bool) -> Iterator[None]:
    """torch.compile compiles lazily, in the first forward and backward: a failure there (no C++
    compiler, an op the backend cannot lower) ends with one line that names the way out."""
    if not enabled:
        yield
        return
    try:
        yield
    except torch._dynamo.exc.TorchDynamoException as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[0] if lines else ""
        detail = detail if len(detail) <= 300 else detail[:297] + "..."
        raise ConfigError(
            f"torch.compile failed ({type(exc).__name__}: {detail}); set compile=false to train without it"
        ) from exc


# --- random generators ---


def seed_everything(seed: int, deterministic: bool, rank: int = 0) -> None:
    """Seed every generator with `seed + rank`, as timm does: under DDP each rank draws its own
    augmentations (the data order has its own generator, seeded by `seed` alone: data/device_loader.py)."""
    seed = seed + rank
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False


def seed_rank_epoch(seed: int, rank: int, epoch: int) -> None:
    """Under DDP, every generator from (seed, rank, epoch) at each epoch start. Checkpoints hold rank 0's
    generators and DDP checkpoints only at epoch ends, so this is what makes a resumed DDP run draw what
    an uninterrupted one would on every rank, and keeps ranks apart after a resume."""
    (state,) = np.random.SeedSequence([seed, rank, epoch]).generate_state(1)
    random.seed(int(state))
    np.random.seed(int(state))
    torch.manual_seed(int(state))


def rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2])},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    keys = state["numpy"]["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, state["numpy"]["pos"], 0, 0.0))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --- threads ---


CONCURRENT_RUNS_ENV = "CONVINIT_CONCURRENT_RUNS"  # a `--jobs N` grid sets N for its children
RECORD = "threads.json"


@dataclass(frozen=True)
class ThreadChoice:
    """The intra-op thread count of this process and why."""

    threads: int
    reason: str

    def line(self) -> str:
        return f"threads: {self.threads} ({self.reason})"


def choose_threads(
    setting: int | None,
    workers: int = 0,
    recorded: int | None = None,
    env: Mapping[str, str] | None = None,
    cores: int | None = None,
) -> ThreadChoice:
    """The thread count for a run (see the module docstring for the rule)."""
    env = os.environ if env is None else env
    if setting is not None:
        return ThreadChoice(setting, f"threads={setting}")
    omp = positive_int(env.get("OMP_NUM_THREADS", "").split(",")[0] or None)  # "4,2": 4 at the outer level
    if omp is not None:
        changed = recorded is not None and recorded != omp
        unlike = f"; this run started with {recorded}: not bit-identical" if changed else ""
        return ThreadChoice(omp, f"OMP_NUM_THREADS={omp}{unlike}")
    if recorded is not None:
        return ThreadChoice(recorded, "as when this run started, for a bit-identical resume")
    cores = cores or usable_cores()
    runs, ranks = positive_int(env.get(CONCURRENT_RUNS_ENV)) or 1, local_ranks(env)
    if runs * ranks > 1:  # a grid or torchrun's ranks fill the machine by design: an equal share each
        sharing = [f"{runs} runs at once"] * (runs > 1) + [f"{ranks} local ranks"] * (ranks > 1)
        share, why = max(1, cores // (runs * ranks)), f"{cores} cores, {', '.join(sharing)}"
    elif cores > 1:  # one core left to everything else on the machine (the OS, other programs, the bar)
        share, why = cores - 1, f"{cores} cores, one left free"
    else:
        share, why = 1, "1 core"
    threads = max(1, share - workers)
    data = f", less {workers} data workers" if workers else ""
    return ThreadChoice(threads, f"{why}{data}; threads=N to change")


def record_path(run_dir: Path, rank: int = 0) -> Path:
    return run_dir / (RECORD if rank == 0 else f"threads-rank{rank}.json")


def read_recorded(run_dir: Path, rank: int = 0) -> int | None:
    """The thread count rank `rank` of `run_dir` started with (a rank that recorded nothing: the run's
    own); None for a run that recorded none, or (with a one-line warning naming the file and field)
    whose record is damaged."""
    path = record_path(run_dir, rank)
    if not path.exists():
        return None if rank == 0 else read_recorded(run_dir)
    try:
        threads = json.loads(read_capped(path))["threads"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:  # ConfigError is a ValueError
        threads = f"unreadable ({' '.join(str(exc).split())[:120]})"
    if isinstance(threads, int) and not isinstance(threads, bool) and 1 <= threads <= MAX_THREADS:
        return threads
    warnings.warn(
        f"{path}: field 'threads' must be an integer in 1..{MAX_THREADS}, got {short_repr(threads)}; "
        "the count is chosen afresh, so the resumed run may not be bit-identical",
        stacklevel=2,
    )
    return None


def record_threads(run_dir: Path, choice: ThreadChoice, rank: int = 0, workers: int = 0) -> None:
    """This rank's count and why, and its decoding workers, in its own file (ranks never share one)."""
    record = {"threads": choice.threads, "reason": choice.reason, "rank": rank, "workers": workers}
    atomic_write_text(record_path(run_dir, rank), json.dumps(record))


def set_run_threads(
    threads: int | None, run_dir: Path, resume: bool, workers: int = 0, rank: int = 0
) -> ThreadChoice:
    """Choose this run's thread count (`threads` is the config key) and set it for torch."""
    choice = choose_threads(threads, workers, read_recorded(run_dir, rank) if resume else None)
    torch.set_num_threads(choice.threads)
    return choice


# --- ranks under torchrun ---


@dataclass(frozen=True)
class DistributedContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def under_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def is_main_rank() -> bool:
    """Rank 0, or a process outside torchrun: the one that writes the run directory."""
    return int(os.environ.get("RANK", "0")) == 0


def setup_distributed(use_cuda: bool) -> DistributedContext:
    """The context torchrun describes in the environment; starts the process group once."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistributedContext()
    context = DistributedContext(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        if use_cuda:
            torch.cuda.set_device(context.local_rank)
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return context


def barrier(context: DistributedContext) -> None:
    if context.enabled:
        dist.barrier()


def sum_across_ranks(values: list[float], context: DistributedContext, device: torch.device) -> list[float]:
    """Element-wise sum of `values` over all ranks (identity on one process)."""
    if not context.enabled:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()
