"""SLURM submission through submitit: one job per run directory, each resuming that run.

Each job is a `convinit.experiments.slurm_job.TrainJob` on its run directory: on SLURM's pre-emption or
time-out signal it checkpoints at a step boundary and requeues itself, and the requeued job resumes there.
The request is checked with SLURM before anything is queued (`slurm_options.check_request`), each run
folder records its job id (`slurm_state`), and a rerun of the grid submits only the runs that no job
holds: the others are reported as queued, running, finished or failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from convinit.experiments.report import failure_reason
from convinit.experiments.slurm_job import TrainJob, slurm_executor
from convinit.experiments.slurm_options import SlurmOptions
from convinit.experiments.slurm_state import job_states, live_outcome, record_job, recorded_job


def as_options(options: SlurmOptions | dict[str, Any] | None) -> SlurmOptions:
    """`SlurmOptions`, from its field names where a dict is given (the CLI's, or a Python caller's)."""
    if isinstance(options, SlurmOptions):
        return options
    given = {k: v for k, v in (options or {}).items() if v is not None}
    if "sbatch" in given:
        given["sbatch"] = tuple(given["sbatch"])
    return SlurmOptions(**given)


def submit_slurm(
    run_dirs: list[Path], out: Path, options: SlurmOptions | None = None, **named: Any
) -> dict[str, Any]:
    """Submit one job per run, asking for `options` (or `SlurmOptions`' fields by name: partition, gpus,
    cpus, tasks, mem, time_minutes, requeues, account, qos, sbatch); returns {run dir: submitit job}.
    A request SLURM could not start is refused (ConfigError) before anything is queued."""
    request = options or as_options(named)
    executor = slurm_executor(Path(out) / "slurm-logs" / "%j", request)
    with executor.batch():
        submitted = [
            (str(d), executor.submit(TrainJob(d, signal_delay_s=request.signal_delay_s))) for d in run_dirs
        ]
    for run_dir, job in submitted:
        record_job(Path(run_dir), job.job_id)
    return dict(submitted)


def launch_on_slurm(run_dirs: list[Path], out: Path, options: SlurmOptions | dict | None) -> dict[str, str]:
    """{run dir: outcome} for the unfinished runs of a grid: `queued <id>`/`running <id>` for a run that a
    job still holds (with the reason when it will not start), `failed: <reason>` for one whose job failed
    (delete its failed.json to submit it again: a rerun would fail the same way), `submitted <id>` else."""
    request = as_options(options)
    recorded = {run_dir: recorded_job(run_dir) for run_dir in run_dirs}
    states = job_states([job for job in recorded.values() if job])
    outcome: dict[str, str] = {}
    todo = []
    for run_dir in run_dirs:
        job = recorded[run_dir]
        live = live_outcome(job, *states[job]) if job in states else None
        reason = failure_reason(run_dir / "failed.json") if (run_dir / "failed.json").exists() else None
        if live is not None:
            outcome[str(run_dir)] = live
        elif reason is not None and job is not None:
            outcome[str(run_dir)] = f"failed: {reason} (job {job}; delete {run_dir}/failed.json to resubmit)"
        else:
            todo.append(run_dir)
    if todo:
        for run_dir, job in submit_slurm(todo, out, request).items():
            (Path(run_dir) / "failed.json").unlink(missing_ok=True)  # tried again
            outcome[run_dir] = f"submitted {job.job_id}"
    return outcome


def waiting(outcome: dict[str, str]) -> int:
    """How many runs of `outcome` a SLURM job still holds (submitted, queued or running)."""
    return sum(what.split(" ")[0] in ("submitted", "queued", "running") for what in outcome.values())
