"""Which SLURM job holds a run, and what SLURM says of it: no run is queued twice, no wait is silent.

Submitting a run writes `slurm_job.json` (its job id) into the run folder. A rerun of the grid asks SLURM
for those jobs: one still queued or running is not submitted again but reported as `queued <id>` or
`running <id>`, with the reason when it pends on one that waiting will not change (a request no node can
hold, a node that is down), so a wrong request is said instead of waited on. A job SLURM no longer lists
(ended, or forgotten after MinJobAge) leaves its run to the run's own files: finished, failed, or
submitted again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from convinit.system.atomic import atomic_write_text

JOB_FILE = "slurm_job.json"
# squeue's job states in which the job will still run, or runs: a run in one is not submitted again
LIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
               "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD"}  # fmt: skip
# pending reasons that waiting will not change: the request or the partition must change
STUCK_REASONS = {
    "PartitionConfig": "no node of the partition can hold the request",
    "ReqNodeNotAvail": "the nodes it needs are down, drained or reserved",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "PartitionNodeLimit": "it asks more nodes than the partition allows",
    "PartitionTimeLimit": "its time limit is over the partition's",
    "BadConstraints": "no node has the features it asks for",
    "InvalidAccount": "its account is not valid",
    "InvalidQOS": "its QoS is not valid",
    "QOSMaxGRESPerUser": "its QoS allows fewer GPUs",
    "JobHeldAdmin": "an administrator holds it",
    "JobHeldUser": "it is held (scontrol release JOBID)",
}


def record_job(run_dir: Path, job_id: str) -> None:
    """The run's job id, written atomically: a rerun asks SLURM about it before submitting again."""
    atomic_write_text(run_dir / JOB_FILE, json.dumps({"job_id": str(job_id)}, indent=1))


def recorded_job(run_dir: Path) -> str | None:
    """The id of the job last submitted for `run_dir`, or None."""
    try:
        return str(json.loads((run_dir / JOB_FILE).read_text())["job_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def job_states(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """{job id: (state, pending reason)} for the jobs SLURM still lists; requeued ids answer once."""
    from convinit.experiments.slurm_options import slurm

    if not job_ids:
        return {}
    answer = slurm("squeue", "-h", "-r", "-t", "all", "-j", ",".join(sorted(set(job_ids))), "-o", "%i|%T|%r")
    states = {}
    for line in answer.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            states[parts[0]] = (parts[1], parts[2])
    return states


def live_outcome(job_id: str, state: str, reason: str) -> str | None:
    """What a rerun reports of a run whose job SLURM still runs or will run; None when it has ended."""
    if state not in LIVE_STATES:
        return None
    if state in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"):
        stuck = STUCK_REASONS.get(reason)
        if stuck is not None:
            return (
                f"queued {job_id}, will not start: Reason={reason} ({stuck}); scancel {job_id} and resubmit"
            )
        return f"queued {job_id} ({reason})" if reason and reason != "None" else f"queued {job_id}"
    return f"running {job_id}"


def this_job_id() -> str | None:
    """The SLURM job this process runs in (None outside SLURM)."""
    return os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID")


def this_job_state() -> str | None:
    """SLURM's state of the job this process runs in (REQUEUED after `scontrol requeue`, CANCELLED after
    scancel, TIMEOUT at the limit), or None when it cannot be asked."""
    from convinit.errors import ConfigError

    job_id = this_job_id()
    if job_id is None:
        return None
    try:
        return job_states([job_id]).get(job_id, (None, ""))[0]
    except ConfigError:
        return None
