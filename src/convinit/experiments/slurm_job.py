"""Training under SLURM through submitit: a pre-empted or timed-out job requeues itself and resumes.

submitit's checkpointing interface: when SLURM is about to stop a job it sends the preemption signal
(USR2 by default, `--signal=USR2@90` as submitit sets it up); submitit's handler then calls the job's
`checkpoint()`, saves the `DelayedSubmission` it returns in place of the submitted one, requeues the
job and exits. The requeued job runs that submission.

`TrainJob` makes that exact rather than approximate: on the preemption signal it first asks the
trainer to stop at the next step boundary, as SIGTERM does (the trainer writes a step checkpoint),
and only then lets submitit requeue. Its `checkpoint()` returns a fresh `TrainJob` on the same run
directory, and a `TrainJob` always continues its run directory from the newest intact checkpoint
(or starts it), so the requeued job picks up at that step: no step is lost or repeated, and with
`deterministic=true` on the CPU the weights are bit-identical to an uninterrupted run.

A warning that comes while the task still starts is held by its first line (slurm_start) and acted on
as soon as `TrainJob` has its handler in place: the job requeues before its first step.

The other ways SLURM stops a job end the same way, each with one `stopped:` line and no traceback:
SIGTERM from `scontrol requeue` (SLURM requeues the job itself), the time limit reached without the
warning (the job requeues itself). A warning counts against `--requeues` only when it is the time
limit's: submitit would count every warning of a job of 10 minutes or less as one. A run that cannot go
on (an error, a time-out past `--requeues`) writes `failed.json` with the reason. Under a job of several
tasks each task is one DDP rank (`slurm_ranks`), rank 0 the one writer, as under torchrun.

    job = submit_train(cfg, "runs/wide", partition="gpu", gpus=1, time_minutes=240)
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from convinit.config import TrainConfig, save_config
from convinit.errors import ConfigError
from convinit.experiments.failures import record_failure
from convinit.experiments.slurm_options import (
    SIGNAL_DELAY_S,
    SLURM_CHECK_PERIOD_S,
    START_S,
    SlurmOptions,
    check_request,
    preemption_signal,
)
from convinit.experiments.slurm_state import this_job_id
from convinit.runs.run_dir import CONFIG_FILE
from convinit.runs.signals import RunInterrupted, continue_with
from convinit.system.held_signals import deliver_held
from convinit.train.process import is_main_rank
from convinit.train.trainer import train

try:
    from submitit.helpers import Checkpointable, DelayedSubmission
except ImportError:  # submitit is optional (`pip install "convinit[slurm]"`)
    Checkpointable, DelayedSubmission = object, None

REQUEUES_ITSELF = "the SLURM job requeues itself and resumes from it (nothing to run)"


def slurm_ranks() -> None:
    """In a SLURM job of several tasks, RANK/WORLD_SIZE/MASTER_ADDR/PORT from SLURM's environment (as
    torchrun sets them), so the trainer runs them as the ranks of one DDP run."""
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "WORLD_SIZE" not in os.environ:
        from submitit.helpers import TorchDistributedEnvironment

        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def job_fields() -> dict[str, str]:
    """`scontrol show job` of this job as {field: value}; empty when SLURM cannot be asked."""
    from convinit.experiments.slurm_options import slurm

    job_id = this_job_id()
    if job_id is None:
        return {}
    try:
        answer = slurm("scontrol", "-o", "show", "job", job_id)
    except ConfigError:
        return {}
    return dict(re.findall(r"(\w+)=(\S*)", answer.stdout))


class JobStop:
    """How this job was stopped, and what to say and do about it."""

    def __init__(self, run_dir: Path, signal_delay_s: int):
        self.run_dir = run_dir
        self.signal_delay_s = signal_delay_s
        self.warned = False  # the preemption signal came: submitit requeues after the checkpoint
        self.requeue: Any = None  # submitit's checkpoint-and-requeue handler, inside a job
        self.why: str | None = None

    def timed_out(self, started: float, timeout_min: float) -> bool:
        """Whether the warning is the time limit's (`signal_delay_s` before it, or up to SLURM's resolution
        earlier), not a pre-emption."""
        early = self.signal_delay_s + SLURM_CHECK_PERIOD_S + START_S
        return time.time() - started >= timeout_min * 60 - early

    def install(self) -> Any:
        """Put the stop-then-requeue handler on the preemption signal; returns the handler it replaced."""
        sig = preemption_signal()
        self.requeue = signal.getsignal(sig)
        handler = getattr(self.requeue, "__self__", None)
        if handler is not None and hasattr(handler, "has_timed_out"):  # submitit's SignalHandler
            started, timeout_min = handler._start_time, handler._delayed._timeout_min
            handler.has_timed_out = lambda: self.timed_out(started, timeout_min)
        before = signal.getsignal(signal.SIGTERM)

        def stop_then_requeue(signum: int, frame: FrameType | None) -> None:
            self.warned = True
            if signal.getsignal(signal.SIGTERM) is before:  # the trainer is not running: nothing to save
                if callable(self.requeue):
                    print(f"stopped: warned before training started, nothing lost; {REQUEUES_ITSELF}")
                    self.requeue(signum, frame)
                return
            os.kill(os.getpid(), signal.SIGTERM)  # the trainer's handler: stop at the next step boundary

        signal.signal(sig, stop_then_requeue)
        return self.requeue

    def continuation(self) -> str:
        """The end of the `stopped:` line: what happens next, decided from what SLURM says of the job."""
        if self.warned:
            self.why = "warned"
            return REQUEUES_ITSELF
        fields = job_fields()
        restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        if int(fields.get("Restarts", restarts) or 0) > restarts:  # `scontrol requeue`, or a pre-emption
            self.why = "requeued"
            return "SLURM requeued the job; it resumes from it (nothing to run)"
        if fields.get("JobState") == "TIMEOUT" or fields.get("Reason") == "TimeLimit":
            self.why = "timeout"
            return REQUEUES_ITSELF
        self.why = "cancelled"
        return "the job was cancelled; run the same command again (or resubmit the grid) to resume"

    def after(self, exc: RunInterrupted) -> None:
        """After the trainer stopped: requeue (a warning, the time limit), or end quietly."""
        if self.why is None:
            self.continuation()
        if self.why in ("warned", "timeout") and callable(self.requeue):
            try:
                self.requeue(preemption_signal(), None)  # calls checkpoint(), requeues the job and exits
            except Exception as error:  # out of time-out requeues, or SLURM refused the requeue
                if is_main_rank():
                    record_failure(self.run_dir, failure_reason(error))
                raise
        raise SystemExit(0 if self.why == "requeued" else 128 + exc.signum)


def failure_reason(exc: BaseException) -> str:
    """What `failed.json` says of an error that ends a job."""
    if type(exc).__name__ == "UncompletedJobError":  # submitit: out of time-out requeues
        return (
            f"{exc} The job reached its time limit more often than --requeues allows: give a longer "
            "--time or more --requeues, and rerun the grid to resume it"
        )
    return str(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"


class TrainJob(Checkpointable):
    """A submitit job that trains `cfg` into `run_dir`, continuing whatever the folder already holds.

    Calling it twice, or after a requeue, is safe: it resumes from the newest intact checkpoint, and
    a finished run just returns its final metrics. `cfg` may be None when `run_dir/config.yaml`
    exists; if both exist they must agree (a ConfigError names the differing keys).
    """

    def __init__(
        self, run_dir: str | Path, cfg: TrainConfig | None = None, signal_delay_s: int = SIGNAL_DELAY_S
    ):
        self.run_dir = str(run_dir)
        self.cfg = cfg
        self.signal_delay_s = signal_delay_s

    def __call__(self) -> dict[str, Any]:
        """Train to the end; returns the final metrics row."""
        run_dir = Path(self.run_dir)
        slurm_ranks()
        if not (run_dir / CONFIG_FILE).exists():
            if self.cfg is None:
                raise ConfigError(f"{run_dir} holds no config.yaml; pass the TrainConfig to TrainJob")
            if is_main_rank():
                run_dir.mkdir(parents=True, exist_ok=True)
                save_config(self.cfg, run_dir / CONFIG_FILE)
        if threading.current_thread() is not threading.main_thread():  # signals need the main thread
            return train(self.cfg, run_dir=run_dir, resume=True, progress=False).metrics[-1]
        stop = JobStop(run_dir, self.signal_delay_s)
        requeue = stop.install()
        try:
            deliver_held()  # a warning that came while the task started (slurm_start) is acted on now
            with continue_with(stop.continuation):
                return train(self.cfg, run_dir=run_dir, resume=True, progress=False).metrics[-1]
        except RunInterrupted as exc:
            stop.after(exc)
            raise
        except Exception as exc:  # the run cannot go on: the report and a rerun read why
            if is_main_rank():
                record_failure(run_dir, failure_reason(exc))
            raise
        finally:
            signal.signal(preemption_signal(), requeue if requeue is not None else signal.SIG_DFL)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """What submitit requeues: a fresh job on the same run directory, which resumes it."""
        if DelayedSubmission is None:
            raise ConfigError('TrainJob needs submitit: pip install "convinit[slurm]"')
        return DelayedSubmission(TrainJob(self.run_dir, self.cfg, self.signal_delay_s))


def slurm_executor(folder: Path, options: SlurmOptions) -> Any:
    """submitit's SlurmExecutor asking for `options`, after SLURM has said it could start such a job."""
    try:
        import submitit
    except ImportError as exc:
        raise ConfigError('--launcher slurm needs submitit: pip install "convinit[slurm]"') from exc
    check_request(options)
    # each task starts in slurm_start, which holds an early warning instead of dying of it
    python = f"{shlex.quote(sys.executable)} -u -m convinit.experiments.slurm_start"
    executor = submitit.SlurmExecutor(folder=str(folder), max_num_timeout=options.requeues, python=python)
    executor.update_parameters(**options.submitit_parameters())
    return executor


def submit_train(
    cfg: TrainConfig | None, run_dir: str | Path, folder: str | Path | None = None, **options: Any
) -> Any:
    """Submit `TrainJob(run_dir, cfg)` to SLURM; `options` are `SlurmOptions`' (partition, gpus, cpus,
    tasks, mem, time_minutes, requeues, account, qos, sbatch), refused in one line before anything is
    queued when SLURM could not start them. Logs go to `folder` (default run_dir/slurm).
    Returns the submitit Job; `job.result()` is the final metrics row.
    """
    request = SlurmOptions(**options)
    executor = slurm_executor(Path(folder or Path(run_dir) / "slurm"), request)
    if cfg is not None and not (Path(run_dir) / CONFIG_FILE).exists():  # every rank finds it
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        save_config(cfg, Path(run_dir) / CONFIG_FILE)
    return executor.submit(TrainJob(run_dir, cfg, request.signal_delay_s))
