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

    job = submit_train(cfg, "runs/wide", slurm_partition="gpu", gpus_per_node=1, timeout_min=240)
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from convinit.config import TrainConfig, save_config
from convinit.errors import ConfigError
from convinit.runs.signals import RunInterrupted
from convinit.train.trainer import train

try:
    from submitit.helpers import Checkpointable, DelayedSubmission
except ImportError:  # submitit is optional (`pip install "convinit[slurm]"`)
    Checkpointable, DelayedSubmission = object, None


def preemption_signal() -> signal.Signals:
    """The signal submitit treats as preemption: $SUBMITIT_PREEMPT_SIGNAL, USR2 by default."""
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return getattr(signal, name if name.startswith("SIG") else f"SIG{name}")


class TrainJob(Checkpointable):
    """A submitit job that trains `cfg` into `run_dir`, continuing whatever the folder already holds.

    Calling it twice, or after a requeue, is safe: it resumes from the newest intact checkpoint, and
    a finished run just returns its final metrics. `cfg` may be None when `run_dir/config.yaml`
    exists; if both exist they must agree (a ConfigError names the differing keys).
    """

    def __init__(self, run_dir: str | Path, cfg: TrainConfig | None = None):
        self.run_dir = str(run_dir)
        self.cfg = cfg

    def __call__(self) -> dict[str, Any]:
        """Train to the end; returns the final metrics row."""
        run_dir = Path(self.run_dir)
        if not (run_dir / "config.yaml").exists():
            if self.cfg is None:
                raise ConfigError(f"{run_dir} holds no config.yaml; pass the TrainConfig to TrainJob")
            run_dir.mkdir(parents=True, exist_ok=True)
            save_config(self.cfg, run_dir / "config.yaml")
        if threading.current_thread() is not threading.main_thread():  # signals need the main thread
            return train(self.cfg, run_dir=run_dir, resume=True, progress=False).metrics[-1]
        sig = preemption_signal()
        requeue = signal.getsignal(sig)  # submitit's checkpoint-and-requeue handler, inside a job
        before = signal.getsignal(signal.SIGTERM)
        preempted = {"flag": False}

        def stop_then_requeue(signum: int, frame: FrameType | None) -> None:
            preempted["flag"] = True
            if signal.getsignal(signal.SIGTERM) is before:  # the trainer is not in its loop: nothing to save
                if callable(requeue):
                    requeue(signum, frame)
                return
            os.kill(os.getpid(), signal.SIGTERM)  # the trainer's handler: stop at the next step boundary

        signal.signal(sig, stop_then_requeue)
        try:
            run = train(self.cfg, run_dir=run_dir, resume=True, progress=False)
        except RunInterrupted:
            if preempted["flag"] and callable(requeue):
                requeue(sig, None)  # calls self.checkpoint(), requeues the job and exits
            raise
        finally:
            signal.signal(sig, requeue if requeue is not None else signal.SIG_DFL)
        return run.metrics[-1]

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """What submitit requeues: a fresh job on the same run directory, which resumes it."""
        if DelayedSubmission is None:
            raise ConfigError('TrainJob needs submitit: pip install "convinit[slurm]"')
        return DelayedSubmission(TrainJob(self.run_dir, self.cfg))


def submit_train(
    cfg: TrainConfig | None, run_dir: str | Path, folder: str | Path | None = None, **parameters: Any
) -> Any:
    """Submit `TrainJob(run_dir, cfg)` with submitit's AutoExecutor (SLURM if present, else local).

    `parameters` go to `executor.update_parameters` (e.g. slurm_partition, gpus_per_node,
    timeout_min, cluster="local" for a local process); logs go to `folder` (default run_dir/slurm).
    Returns the submitit Job; `job.result()` is the final metrics row.
    """
    try:
        import submitit
    except ImportError as exc:
        raise ConfigError('SLURM training needs submitit: pip install "convinit[slurm]"') from exc
    cluster = parameters.pop("cluster", None)
    executor = submitit.AutoExecutor(folder=str(folder or Path(run_dir) / "slurm"), cluster=cluster)
    executor.update_parameters(**parameters)
    return executor.submit(TrainJob(run_dir, cfg))
