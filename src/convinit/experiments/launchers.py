"""SLURM submission through submitit: one job per run directory, each resuming that run.

Each job is a `convinit.experiments.slurm_job.TrainJob` on its run directory: on SLURM's pre-emption or
time-out signal it checkpoints at a step boundary and requeues itself, and the requeued job resumes there.
Tests use submitit's local executor (`cluster="local"`).
"""

from __future__ import annotations

from pathlib import Path

from convinit.errors import ConfigError
from convinit.experiments.slurm_job import TrainJob


def submit_slurm(
    run_dirs: list[Path],
    out: Path,
    partition: str | None = None,
    gpus: int = 1,
    time_minutes: int = 24 * 60,
    cpus: int = 8,
    cluster: str | None = None,
) -> dict:
    """Submit one job per run; returns {run dir: submitit job}. `cluster="local"` runs local processes."""
    try:
        import submitit
    except ImportError as exc:
        raise ConfigError('--launcher slurm needs submitit: pip install "convinit[slurm]"') from exc
    executor = submitit.AutoExecutor(folder=str(out / "slurm-logs" / "%j"), cluster=cluster)
    params = {"timeout_min": time_minutes, "cpus_per_task": cpus}
    if cluster != "local":
        params.update(
            gpus_per_node=gpus, slurm_partition=partition, slurm_additional_parameters={"requeue": True}
        )
        params = {k: v for k, v in params.items() if v is not None}
    executor.update_parameters(**params)
    with executor.batch():
        submitted = [(str(d), executor.submit(TrainJob(d))) for d in run_dirs]
    return dict(submitted)
