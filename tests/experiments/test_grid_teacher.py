"""A grid row may learn from another row's run (DeiT's distillation from the CNN of the same seed):
`teacher: "{grid}/<row>/seed{seed}"`, bound to the grid's folder and each run's seed, trained after the
runs it learns from, and never started on a teacher that did not finish."""

from __future__ import annotations

import json

import pytest
import yaml

from convinit.config import load_config
from convinit.errors import ConfigError
from convinit.experiments.grid import expand
from convinit.experiments.runner import run_grid

TINY = {
    "model_args.patch_size": 4,
    "model_args.dim": 16,
    "model_args.depth": 1,
    "model_args.heads": 1,
    "model_args.dim_head": 16,
    "model_args.mlp_dim": 16,
    "epochs": 1,
    "batch_size": 250,
    "warmup_epochs": 0,
    "per_class": 25,
}


def grid_file(tmp_path, teacher: str, teacher_overrides: dict | None = None):
    spec = {
        "description": "a student listed before its teacher",
        "seeds": [0, 1],
        "scales": {"small": {"preset": "default", "overrides": TINY}},
        "rows": [
            {"label": "student", "overrides": {"teacher": teacher}},
            {"label": "teacher", "overrides": teacher_overrides or {}},
        ],
    }
    path = tmp_path / "distill.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_a_student_learns_from_the_teacher_run_of_its_own_seed_trained_before_it(tmp_path):
    out = tmp_path / "grid"
    outcome = run_grid(expand(grid_file(tmp_path, "{grid}/teacher/seed{seed}")), out)
    assert set(outcome.values()) == {"trained"}
    for seed in (0, 1):
        student = out / "student" / f"seed{seed}"
        assert load_config(student / "config.yaml").teacher == str(out / "teacher" / f"seed{seed}")
        assert (student / "finished.json").is_file()


def test_a_student_whose_teacher_did_not_finish_is_not_started(tmp_path):
    out = tmp_path / "grid"
    broken = {"lr": 1e30, "epochs": 3}  # the teacher diverges in its second step: it never finishes
    outcome = run_grid(expand(grid_file(tmp_path, "{grid}/teacher/seed{seed}", broken)), out)
    student = out / "student" / "seed0"
    assert outcome[str(student)].startswith("failed: its teacher")
    assert "has not finished" in json.loads((student / "failed.json").read_text())["reason"]
    assert not (student / "checkpoints").exists()


def test_a_teacher_placeholder_other_than_grid_and_seed_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^row 'student': teacher .* may name only \{grid\} and \{seed\}"):
        run_grid(expand(grid_file(tmp_path, "{grid}/teacher/seed{run}")), tmp_path / "grid")
