"""What a SLURM job asks for, checked against the cluster before anything is queued.

`SlurmOptions` holds a cluster user's choices (partition, GPUs, CPUs and tasks, memory, time limit,
account, QoS, any other sbatch option, the time-outs a job may requeue after). `check_request` refuses
with one line what SLURM could never start, asking SLURM itself (`sbatch --test-only`, then `sinfo` for
the hint): a partition that does not exist, more GPUs, CPUs or memory than any node of the partition
has, a time limit too short to start and checkpoint. A job that pends forever on such a request while
the command said `submitted` is the mistake this prevents.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from typing import Any

from convinit.errors import ConfigError

SIGNAL_DELAY_S = 90  # submitit's warning before the limit (USR2), in which the job checkpoints
# SLURM's resolution for the warning (sbatch --signal: it "may be sent up to 60 seconds earlier than
# specified"; seen here: asked 90 s before a 2-minute limit, it came 11 s in; asked 45 s before a 1-minute
# limit, it came 14 s in for one job and not at all for its twin, whose limit came first). A warning can
# come this much earlier, and a window shorter than this can be missed
SLURM_CHECK_PERIOD_S = 60
START_S = 15  # a job needs about this long to start Python and take a step before the warning
SLURM_TIMEOUT_S = 30  # the longest any sinfo/squeue/sbatch call may take before it counts as no answer


def preemption_signal() -> signal.Signals:
    """The signal submitit treats as preemption: $SUBMITIT_PREEMPT_SIGNAL, USR2 by default."""
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return getattr(signal, name if name.startswith("SIG") else f"SIG{name}")


@dataclass(frozen=True)
class SlurmOptions:
    """One job per run: `gpus` GPUs (0 on a CPU partition) and as many ranks, or `tasks` CPU ranks;
    `cpus` CPUs and `mem` (SLURM's syntax: 16G, 4000M) per node... as sbatch reads them; `time_minutes`
    the limit; `requeues` the time-outs after which a job still requeues itself (pre-emptions do not
    count); `sbatch` any other option as KEY=VALUE (`constraint=a100`, `mail-type=END`)."""

    partition: str | None = None
    gpus: int = 1
    cpus: int = 8
    tasks: int = 1
    mem: str | None = None
    time_minutes: int = 24 * 60
    requeues: int = 3
    account: str | None = None
    qos: str | None = None
    sbatch: tuple[str, ...] = field(default_factory=tuple)
    signal_delay_s: int = SIGNAL_DELAY_S

    @property
    def ranks(self) -> int:
        """Processes of one training run: one per GPU, else `tasks` on the CPUs."""
        return self.gpus if self.gpus > 0 else self.tasks

    def extra_sbatch(self) -> dict[str, str | bool]:
        """The pass-through options as {name: value}; a bare name is a flag (`exclusive`: True)."""
        extra: dict[str, str | bool] = {}
        for item in self.sbatch:
            name, _, value = item.partition("=")
            name = name.strip().lstrip("-")
            if not name:
                raise ConfigError(f"--sbatch {item!r} is not KEY=VALUE, e.g. --sbatch constraint=a100")
            extra[name] = value.strip() if "=" in item else True
        return extra

    def submitit_parameters(self) -> dict[str, Any]:
        """The parameters of submitit's SlurmExecutor."""
        params: dict[str, Any] = {
            "time": self.time_minutes,
            "cpus_per_task": self.cpus,
            "ntasks_per_node": self.ranks,
            "signal_delay_s": self.signal_delay_s,
            "partition": self.partition,
            "gpus_per_node": self.gpus or None,
            "mem": self.mem,
            "account": self.account,
            "qos": self.qos,
            "additional_parameters": {"requeue": True, **self.extra_sbatch()},
            # the batch shell outlives SIGTERM (`scontrol requeue`, scancel) until its srun ends: killed at
            # once, it would end the job while the training process still writes its checkpoint
            "setup": ["trap 'true' TERM"],
        }
        return {k: v for k, v in params.items() if v is not None}

    def sbatch_flags(self) -> list[str]:
        """The same request as sbatch options, for `sbatch --test-only`."""
        flags = [
            f"--time={self.time_minutes}",
            f"--cpus-per-task={self.cpus}",
            f"--ntasks-per-node={self.ranks}",
        ]
        for name, value in (
            ("partition", self.partition),
            ("gpus-per-node", self.gpus or None),
            ("mem", self.mem),
            ("account", self.account),
            ("qos", self.qos),
        ):
            if value is not None:
                flags.append(f"--{name}={value}")
        flags += [f"--{k}" if v is True else f"--{k}={v}" for k, v in self.extra_sbatch().items()]
        return flags


def shortest_time_minutes(signal_delay_s: int = SIGNAL_DELAY_S) -> int:
    """The shortest limit in which a job starts and trains before its warning: the warning comes
    `signal_delay_s` before the limit, or up to SLURM_CHECK_PERIOD_S earlier, and a job needs START_S to
    start."""
    return -(-(signal_delay_s + SLURM_CHECK_PERIOD_S + START_S) // 60)


def check_options(options: SlurmOptions) -> None:
    """The mistakes seen without asking SLURM: counts below one, a time too short, a malformed option."""
    for name, value, least in (
        ("--gpus", options.gpus, 0),
        ("--cpus", options.cpus, 1),
        ("--tasks", options.tasks, 1),
        ("--requeues", options.requeues, 0),
    ):
        if value < least:
            raise ConfigError(f"{name} {value} must be {least} or more")
    if options.gpus > 0 and options.tasks not in (1, options.gpus):
        raise ConfigError(
            f"--gpus {options.gpus} runs one rank per GPU; --tasks {options.tasks} is for CPU jobs (--gpus 0)"
        )
    if options.signal_delay_s < SLURM_CHECK_PERIOD_S:
        raise ConfigError(
            f"a warning {options.signal_delay_s} s before the limit can be missed (SLURM looks at limits "
            f"about every {SLURM_CHECK_PERIOD_S} s); give {SLURM_CHECK_PERIOD_S} s or more"
        )
    shortest = shortest_time_minutes(options.signal_delay_s)
    if options.time_minutes < shortest:
        raise ConfigError(
            f"--time {options.time_minutes} is too short: SLURM warns a job {options.signal_delay_s} s "
            f"before its limit (or up to {SLURM_CHECK_PERIOD_S} s earlier) to checkpoint and requeue, and a "
            f"job needs ~{START_S} s to start before that; give --time {shortest} or more"
        )
    if options.mem is not None and mebibytes(options.mem) is None:
        raise ConfigError(f"--mem {options.mem!r} is not a size like 16G, 4000M or 4000 (MB)")
    options.extra_sbatch()


def mebibytes(size: str) -> int | None:
    """SLURM's memory syntax (a number, M by default, or K/M/G/T) in MB; None if it is not one."""
    match = re.fullmatch(r"(\d+)([KMGT]?)B?", size.strip().upper())
    if match is None:
        return None
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2}[match.group(2)]
    return int(int(match.group(1)) * scale)


def slurm(*command: str) -> subprocess.CompletedProcess:
    """A SLURM client command with a bounded wait; ConfigError when SLURM is not there to ask."""
    if shutil.which(command[0]) is None:
        raise ConfigError(
            f"--launcher slurm needs SLURM's {command[0]} on PATH (none here); on a laptop, "
            "scripts/slurm-up starts a one-node SLURM"
        )
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=SLURM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"SLURM did not answer `{' '.join(command)}` in {SLURM_TIMEOUT_S} s; is slurmctld up? "
            "(scontrol ping)"
        ) from None


@dataclass(frozen=True)
class NodeShape:
    """The largest request a node of a partition can hold (each figure over its nodes)."""

    cpus: int
    mem_mb: int
    gpus: int


def partitions() -> tuple[list[str], str | None]:
    """The partitions SLURM knows here, and the default one (starred by sinfo)."""
    answer = slurm("sinfo", "-h", "-o", "%P")
    names = [line.strip() for line in answer.stdout.splitlines() if line.strip()]
    default = next((name.rstrip("*") for name in names if name.endswith("*")), None)
    return sorted({name.rstrip("*") for name in names}), default


def node_shape(partition: str) -> NodeShape:
    """The most CPUs, memory and GPUs any one node of `partition` has."""
    answer = slurm("sinfo", "-h", "-N", "-p", partition, "-o", "%c|%m|%G")
    shapes = [line.split("|") for line in answer.stdout.splitlines() if line.count("|") == 2]
    gpus = [sum(int(n) for n in re.findall(r"gpu(?::[^:,(]+)?:(\d+)", gres)) for _, _, gres in shapes]
    return NodeShape(
        cpus=max((int(c) for c, _, _ in shapes), default=0),
        mem_mb=max((int(m.rstrip("+")) for _, m, _ in shapes), default=0),
        gpus=max(gpus, default=0),
    )


def why_refused(options: SlurmOptions, message: str) -> str:
    """The one line saying which part of the request no node of the partition can hold, and the fix."""
    names, default = partitions()
    partition = options.partition or default
    if partition is None:
        return "SLURM has no default partition here; pass --partition NAME"
    if partition not in names:
        return (
            f"partition {partition!r} does not exist; SLURM has: {', '.join(names) or 'none'} (--partition)"
        )
    shape = node_shape(partition)
    where = f"no node of partition {partition!r} has"
    if options.gpus > shape.gpus:
        fix = "--gpus 0 for a CPU partition" if shape.gpus == 0 else f"--gpus {shape.gpus} or fewer"
        return f"{where} {options.gpus} GPU(s) (the most is {shape.gpus}); pass {fix}"
    if options.cpus * options.ranks > shape.cpus:
        most = max(shape.cpus // options.ranks, 1)
        return (
            f"{where} {options.cpus * options.ranks} CPUs ({options.ranks} rank(s) x --cpus {options.cpus}; "
            f"the most is {shape.cpus}); pass --cpus {most} or fewer"
        )
    if options.mem is not None and (mebibytes(options.mem) or 0) > shape.mem_mb:
        most = f"{shape.mem_mb}M"
        return f"{where} {options.mem} of memory (the most is {most}); pass --mem {most} or less"
    return f"SLURM refuses the request: {message}"


def check_request(options: SlurmOptions) -> None:
    """Refuse, in one line and before anything is queued, a request SLURM could not start."""
    check_options(options)
    answer = slurm("sbatch", "--test-only", *options.sbatch_flags(), "--wrap", "true")
    if answer.returncode != 0:
        lines = [line.strip() for line in (answer.stderr or answer.stdout).splitlines() if line.strip()]
        message = lines[-1].removeprefix("sbatch: error: ") if lines else f"exit {answer.returncode}"
        raise ConfigError(why_refused(options, message))
