"""`--launcher slurm` against a real SLURM (scripts/slurm-up in CI): what each job asks for, the
refusals before anything is queued, no duplicate submissions, states on a rerun, and the report."""

from __future__ import annotations

import csv
import subprocess

import pytest
import yaml

from convinit.cli import main
from convinit.config import parse_overrides
from tests.slurm_cluster import job_state, slurm, wait_for, wait_until_ended  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("slurm")

ON_THIS_NODE = ["--launcher", "slurm", "--gpus", "0", "--cpus", "1", "--no-progress"]


@pytest.fixture
def grid(tmp_path, tiny_overrides):
    """A two-run grid on digits, seconds per run."""
    spec = {
        "description": "two rows on digits",
        "seeds": [0],
        "scales": {"small": {"preset": "default", "overrides": parse_overrides(tiny_overrides)}},
        "rows": [{"label": "adamw", "overrides": {}}, {"label": "adam", "overrides": {"optimizer": "adam"}}],
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def outcome_lines(capsys) -> dict[str, str]:
    """{run folder name: outcome word} from `convinit reproduce`'s printed lines."""
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    return {
        "/".join(words[-1].split("/")[-2:]): words[0]
        for words in lines
        if len(words) >= 2 and "/seed" in words[-1]
    }


def job_ids(out) -> list[str]:
    return [path.read_text().split('"')[3] for path in sorted(out.glob("*/seed*/slurm_job.json"))]


def test_a_slurm_grid_is_submitted_once_reported_while_queued_and_reported_like_a_local_grid_at_the_end(
    grid, tmp_path, capsys
):
    out = tmp_path / "out"
    argv = ["reproduce", grid, *ON_THIS_NODE, "--time", "5", "--out", str(out)]
    assert main(argv) == 0
    assert set(outcome_lines(capsys).values()) == {"submitted"}
    first = job_ids(out)
    assert len(first) == 2 and not (out / "report.md").exists()  # the runs have not trained yet
    assert main(argv) == 0  # a rerun while the jobs are queued or running submits nothing again
    assert set(outcome_lines(capsys).values()) <= {"queued", "running", "skipped"}
    assert job_ids(out) == first
    for job in first:
        assert wait_until_ended(job) in ("COMPLETED", "GONE")
    assert main(argv) == 0  # the jobs have ended: the rerun writes the report a local grid writes
    assert set(outcome_lines(capsys).values()) == {"skipped"}
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert sorted(row["method"] for row in rows) == ["adam", "adamw"]
    assert (out / "report.md").read_text().count("adam") >= 2
    assert main(["report", str(out)]) == 0


@pytest.mark.parametrize(
    "options, refusal",
    [
        (["--gpus", "1"], "has 1 GPU(s) (the most is 0); pass --gpus 0 for a CPU partition"),
        (["--gpus", "0", "--partition", "nowhere"], "partition 'nowhere' does not exist"),
        (["--gpus", "0", "--cpus", "4096"], "pass --cpus"),
        (["--gpus", "0", "--cpus", "1", "--mem", "900T"], "of memory (the most is"),
        (["--gpus", "0", "--cpus", "1", "--time", "1"], "--time 1 is too short"),
        (["--gpus", "0", "--cpus", "1", "--sbatch", "nodelist=nowhere"], "SLURM refuses the request"),
    ],
)
def test_a_request_slurm_cannot_start_is_refused_in_one_line_before_anything_is_queued(
    grid, tmp_path, capsys, options, refusal
):
    before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
    out = tmp_path / "out"
    assert main(["reproduce", grid, "--launcher", "slurm", *options, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert refusal in err and len(err.splitlines()) == 1 and err.startswith("convinit: error:"), err
    assert not out.exists()  # nothing left behind
    after = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
    assert set(after.split()) <= set(before.split())  # nothing queued


def scontrol_fields(job: str) -> dict[str, str]:
    answer = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True)
    return dict(item.split("=", 1) for item in answer.stdout.split() if "=" in item)


def test_efficiency_jobs_ask_slurm_for_the_given_cpus_memory_time_and_sbatch_options(tmp_path, capsys):
    out = tmp_path / "eff"
    argv = [
        "efficiency",
        "--method",
        "a=default epochs=1 device=cpu",
        "--fractions",
        "0.1",
        "--out",
        str(out),
    ]
    request = [
        *ON_THIS_NODE,
        "--time",
        "7",
        "--mem",
        "600M",
        "--sbatch",
        "hold",
        "--sbatch",
        "comment=convinit-test",
    ]
    assert main([*argv, *request]) == 0  # held: it stays queued, and says why
    [job] = job_ids(out)  # one method, one fraction, one seed
    try:
        fields = scontrol_fields(job)
        assert fields["TimeLimit"] == "00:07:00" and fields["Partition"] == "cpu"
        assert fields["NumCPUs"] == "1" and fields["MinMemoryNode"] == "600M"
        assert fields["Comment"] == "convinit-test"
        capsys.readouterr()
        assert main([*argv, *request]) == 0  # the rerun names the reason the job will not start
        said = capsys.readouterr().out
        assert f"queued {job}, will not start: Reason=JobHeldUser" in said, said
        assert "report" not in said.split("\n")[-2]
        assert job_ids(out) == [job]
    finally:
        subprocess.run(["scancel", job], check=False)
