"""SLURM submission through submitit: one job per run directory, each resuming that run.

A job runs `convinit.train.train(resume=True)` on its run directory, so a pre-empted or requeued job
picks up from the newest checkpoint. Tests use submitit's local executor (`cluster="local"`).
"""

from __future__ import annotations

from pathlib import Path

from convinit.errors import ConfigError


def resume_run(run_dir: str) -> float:
    """What each job executes: train the run to the end (resuming it) and return its final accuracy."""
    from convinit.train import train

    run = train(None, run_dir=run_dir, resume=True, progress=False)
    return run.metrics[-1].get("test_acc", float("nan"))


def submit_slurm(
    run_dirs: list[Path],
    out: Path,
    partition: str | None = None,
    gpus: int = 1,
    time_minutes: int = 24 * 60,
    cpus: int = 8,
    cluster: str | None = None,
) -> dict[str, str]:
    """Submit one job per run; returns {run dir: job id}. `cluster="local"` runs them as local processes."""
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
    jobs = {}
    with executor.batch():
        submitted = [(str(d), executor.submit(resume_run, str(d))) for d in run_dirs]
    for run_dir, job in submitted:
        jobs[run_dir] = job.job_id
    return jobs
