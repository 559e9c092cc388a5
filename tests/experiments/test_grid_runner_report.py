"""Experiment grids: expansion, resumable running, reports with provenance, efficiency curves."""

from __future__ import annotations

import json

import pytest

from convinit.errors import ConfigError
from convinit.experiments.efficiency import area_between, efficiency_runs, efficiency_summary
from convinit.experiments.grid import expand, list_experiments, load_experiment
from convinit.experiments.report import find_runs, summarise, write_report
from convinit.experiments.runner import run_grid

TINY = {
    "model_args.patch_size": 2,
    "model_args.dim": 32,
    "model_args.depth": 1,
    "model_args.heads": 2,
    "model_args.dim_head": 16,
    "model_args.mlp_dim": 32,
    "epochs": 1,
    "batch_size": 100,
    "warmup_epochs": 0,
}


@pytest.fixture
def experiment_file(tmp_path):
    import yaml

    spec = {
        "description": "two rows on digits",
        "seeds": [0, 1],
        "scales": {"small": {"preset": "default", "overrides": TINY}, "full": {"preset": "default"}},
        "rows": [
            {"label": "adamw", "overrides": {}, "paper": 71.9},
            {"label": "adam lr 3e-3", "overrides": {"optimizer": "adam", "lr": 3e-3}, "alpha": 0.1},
        ],
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_row_may_bring_its_own_preset_a_cnn_beside_the_vits(tmp_path):
    import yaml

    spec = {
        "description": "a ViT and a CNN on the same recipe",
        "scales": {"small": {"preset": "own_models/timm_vit_small"}},
        "rows": [{"label": "vit", "overrides": {}},
                 {"label": "cnn", "preset": "own_models/convmixer_small", "overrides": {"epochs": 3}}],
    }  # fmt: skip
    (tmp_path / "mixed.yaml").write_text(yaml.safe_dump(spec))
    vit, cnn = expand(str(tmp_path / "mixed.yaml"), "small")
    assert (vit.preset, vit.config.model) == ("own_models/timm_vit_small", "timm:vit_tiny_patch16_224")
    assert (cnn.preset, cnn.config.model, cnn.config.epochs) == ("own_models/convmixer_small", "convmixer", 3)
    assert "embed_dim" not in cnn.config.model_args and cnn.config.per_class == vit.config.per_class
    spec["rows"][1]["preset"] = 5
    (tmp_path / "mixed.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match="row 'cnn' has a preset that is not a name"):
        expand(str(tmp_path / "mixed.yaml"), "small")


def test_grid_expands_rows_times_seeds_with_validated_configs(experiment_file):
    runs = expand(str(experiment_file), "small")
    assert [(r.label, r.seed) for r in runs] == [
        ("adamw", 0),
        ("adamw", 1),
        ("adam lr 3e-3", 0),
        ("adam lr 3e-3", 1),
    ]
    assert runs[2].config.optimizer == "adam" and runs[2].config.model_args["dim"] == 32
    assert runs[0].paper == 71.9 and runs[2].extra == {"alpha": 0.1}
    assert [r.seed for r in expand(str(experiment_file), "small", seeds=[5])] == [5, 5]


def test_grid_rejects_unknown_scale_and_bad_overrides(experiment_file):
    with pytest.raises(ConfigError, match="no scale 'huge'"):
        expand(str(experiment_file), "huge")
    with pytest.raises(ConfigError, match="unknown config key 'epoks'"):
        expand(str(experiment_file), "small", extra_overrides={"epoks": 1})
    with pytest.raises(ConfigError, match="unknown experiment"):
        expand("no-such-experiment")


def test_grid_run_skips_finished_runs_and_resumes_partial_ones(experiment_file, tmp_path):
    runs = expand(str(experiment_file), "small", seeds=[0])
    outcome = run_grid(runs, tmp_path / "out", progress=False)
    assert sorted(outcome.values()) == ["trained", "trained"]
    finished = tmp_path / "out" / "adamw" / "seed0" / "finished.json"
    assert finished.exists()
    finished.unlink()  # as if killed after its last checkpoint
    outcome = run_grid(runs, tmp_path / "out", progress=False)
    assert sorted(outcome.values())[0].startswith("resumed from epoch-")
    assert sorted(outcome.values())[1] == "skipped"
    assert finished.exists()


def test_report_tabulates_mean_and_std_over_seeds_with_provenance(experiment_file, tmp_path):
    run_grid(expand(str(experiment_file), "small"), tmp_path / "out", progress=False)
    rows = summarise(find_runs(tmp_path / "out"))
    assert [r["method"] for r in rows] == ["adamw", "adam lr 3e-3"] and rows[0]["seeds"] == 2
    report = write_report(tmp_path / "out").read_text()
    assert "| adamw | 2 |" in report and "71.9" in report and "+-" in report
    assert "git_commit" not in report and "seed 0" in report and "convinit 0.1.0" in report
    assert (tmp_path / "out" / "results.csv").exists() and (
        tmp_path / "out" / "curves.png"
    ).stat().st_size > 0
    assert (tmp_path / "out" / "alpha_sweep.png").exists()
    record = json.loads((tmp_path / "out" / "adamw" / "seed0" / "experiment.json").read_text())
    assert {"git_commit", "convinit_version", "torch_version"} <= set(record)


def test_report_of_a_grid_with_training_fractions_plots_the_sample_efficiency_curve(tmp_path):
    import yaml

    rows = [
        {"label": f"{f:.0%}", "overrides": {"train_fraction": f}, "group": "ViT", "fraction": f}
        for f in (0.25, 0.5)
    ]
    spec = {"seeds": [0], "scales": {"small": {"preset": "default", "overrides": TINY}}, "rows": rows}
    (tmp_path / "fractions.yaml").write_text(yaml.safe_dump(spec))
    run_grid(expand(str(tmp_path / "fractions.yaml"), "small"), tmp_path / "out", progress=False)
    report = write_report(tmp_path / "out").read_text()
    assert "![sample efficiency](efficiency.png)" in report
    assert (tmp_path / "out" / "efficiency.png").stat().st_size > 0


def test_report_of_an_empty_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="holds no finished runs"):
        write_report(tmp_path)


def test_area_between_curves_is_the_mean_gap_over_log_images():
    ref = [(10, 50.0), (100, 60.0), (1000, 70.0)]
    assert area_between([(10, 60.0), (100, 70.0), (1000, 80.0)], ref) == pytest.approx(10.0)
    assert area_between([(10, 50.0), (100, 70.0), (1000, 70.0)], ref) == pytest.approx(5.0)


def test_efficiency_runs_scale_epochs_and_count_training_images(tmp_path, digits):
    tenth = sum(int(0.1 * n) for n in digits.train_labels.bincount().tolist())  # floor(f * n_c) per class
    methods = {"vit": ("default", {k: v for k, v in TINY.items() if k != "epochs"} | {"epochs": 2})}
    runs = efficiency_runs(methods, [0.1, 1.0], [0], scale_epochs=True)
    assert [(r.extra["fraction"], r.extra["train_images"], r.config.epochs) for r in runs] == [
        (0.1, tenth, 20),
        (1.0, 1000, 2),
    ]
    runs = efficiency_runs({"vit": ("default", TINY)}, [0.1, 0.5], [0])
    run_grid(runs, tmp_path / "eff", progress=False)
    summary = efficiency_summary(tmp_path / "eff")
    assert f"{tenth} imgs" in summary and "| vit |" in summary and "+0.00" in summary


def test_scaled_epochs_give_every_fraction_as_many_optimisation_steps(digits):
    """batch 100 on digits' 1,000 images: 10 steps an epoch. 5 % (47 images) takes one step an epoch, so
    2 epochs of the whole set (20 steps) are 20 epochs of it, not 2 / 0.05 = 40 (twice the steps)."""
    methods = {"vit": ("default", {k: v for k, v in TINY.items() if k != "epochs"} | {"epochs": 2})}
    runs = efficiency_runs(methods, [0.05, 0.5, 1.0], [0], scale_epochs=True)
    per_epoch = [-(-r.extra["train_images"] // 100) for r in runs]  # the partial batch kept
    assert per_epoch[0] == 1 and per_epoch[-1] == 10
    assert [r.config.epochs * n for r, n in zip(runs, per_epoch, strict=True)] == [20, 20, 20]
    assert [r.extra["steps"] for r in runs] == [20, 20, 20]


def test_shipped_experiments_expand_at_both_scales():
    for name in list_experiments():
        for scale in ("small", "full"):
            try:
                runs = expand(name, scale)
            except ConfigError as exc:
                assert "no scale" in str(exc)
                continue
            assert runs, name


def test_every_shipped_preset_is_a_grid_scale_a_grid_row_or_what_one_extends():
    """No preset lies unused beside the grids as a copy of a row or a scale (`default` and `own_data` are
    the CLI's: what a run without --config starts from)."""
    from convinit.config import preset_names, read_yaml
    from convinit.config.train_config import default_preset, preset_path

    used, todo = set(), [default_preset({}), default_preset({"dataset": "folder"})]
    for name in list_experiments():
        spec = load_experiment(name)
        for base in spec["scales"].values():  # a scale's preset, and a row's own (a CNN beside ViTs)
            todo += [
                base["preset"],
                *(row["preset"] for row in base.get("rows", spec["rows"]) if "preset" in row),
            ]
    while todo:
        name = todo.pop()
        if name not in used:
            used.add(name)
            todo += [parent for parent in [read_yaml(preset_path(name)).get("extends")] if parent]
    assert set(preset_names()) - used == set()


def test_efficiency_keeps_the_methods_in_the_order_given():
    methods = {"zeta": ("default", TINY), "alpha": ("default", TINY | {"lr": 3e-3})}
    runs = efficiency_runs(methods, [0.5, 1.0], [0])
    assert [(r.extra["group"], r.row) for r in runs] == [("zeta", 0), ("zeta", 0), ("alpha", 1), ("alpha", 1)]


def test_a_diverging_row_is_reported_as_failed_and_the_others_still_run(experiment_file, tmp_path, capsys):
    import yaml

    from convinit.cli import main

    spec = yaml.safe_load(experiment_file.read_text())
    spec["rows"].insert(0, {"label": "too fast", "overrides": {"lr": 1.0e6}})
    experiment_file.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    args = ["reproduce", str(experiment_file), "--seeds", "1", "--out", str(out), "--no-progress"]
    assert main(args) == 3
    captured = capsys.readouterr()
    assert "convinit: error: 1 of 3 runs failed" in captured.err
    assert "failed: non-finite" in captured.out
    assert (out / "adamw" / "seed0" / "finished.json").exists(), "the later rows ran"
    report = (out / "report.md").read_text()
    assert "## Failed runs" in report and "| too fast | 0 | non-finite" in report
    assert main(args) == 3, "a rerun tries the failed row again and reports it again"
    assert "skipped" in capsys.readouterr().out


def test_a_rerun_with_changed_settings_names_the_runs_instead_of_skipping_them(experiment_file, tmp_path):
    runs = expand(str(experiment_file), "small", seeds=[0])
    run_grid(runs, tmp_path / "out", progress=False)
    changed = expand(str(experiment_file), "small", seeds=[0], extra_overrides={"epochs": 2})
    with pytest.raises(
        ConfigError, match=r"trained with other settings: adamw/seed0 \(epochs\); adam-lr-3e-3"
    ):
        run_grid(changed, tmp_path / "out", progress=False)


def test_rows_that_would_share_a_folder_are_refused(experiment_file):
    runs = expand(str(experiment_file), "small", seeds=[0])
    runs[1].label = "AdamW"  # the same folder as "adamw"
    with pytest.raises(ConfigError, match="would share the folder adamw/seed0"):
        run_grid(runs, experiment_file.parent / "out", progress=False)


def test_rows_that_fail_in_child_processes_are_recorded_with_the_childs_message(experiment_file, tmp_path):
    # --jobs 2: each run is a `convinit train --resume` child; here both fail at once, reading the data (its
    # files are there, so the grid's own checks pass them, but they are not IDX files)
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for name in ("train-images-idx3", "train-labels-idx1", "t10k-images-idx3", "t10k-labels-idx1"):
        (damaged / f"{name}-ubyte").write_bytes(b"junk")
    runs = expand(
        str(experiment_file),
        "small",
        seeds=[0],
        extra_overrides={"dataset": "fashion-mnist", "data_dir": str(damaged)},
    )
    outcome = run_grid(runs, tmp_path / "out", jobs=2, progress=False)
    assert all(what.startswith(f"failed: {damaged}/train-images") for what in outcome.values()), outcome
    reason = json.loads((tmp_path / "out" / "adamw" / "seed0" / "failed.json").read_text())["reason"]
    assert reason.startswith(f"{damaged}/train-images-idx3-ubyte is not an unsigned-byte IDX file")


def test_reproduce_runs_only_the_rows_named_and_a_rerun_that_trains_nothing_says_so(
    experiment_file, tmp_path, capsys
):
    from convinit.cli import main

    out = tmp_path / "out"
    args = ["reproduce", str(experiment_file), "--row", "adam-lr-3e-3", "--seeds", "1", "--out", str(out)]
    assert main([*args, "--no-progress"]) == 0
    assert [p.parent.relative_to(out).as_posix() for p in out.rglob("finished.json")] == [
        "adam-lr-3e-3/seed0"
    ]
    assert "already finished" not in capsys.readouterr().out
    assert main([*args, "--no-progress"]) == 0
    said = capsys.readouterr().out
    assert f"every run of this grid in {out} was already finished (1 skipped): nothing was trained" in said
    assert "pass another --out" in said


def test_an_unknown_row_is_refused_naming_the_grids_rows(experiment_file):
    from convinit.experiments.grid import select_rows

    runs = expand(str(experiment_file), "small")
    assert {r.label for r in select_rows(runs, ["adamw"])} == {"adamw"}
    assert select_rows(runs, None) == runs
    with pytest.raises(ConfigError, match=r"--row 'adamx' is not a row of this grid; did you mean 'adamw'\?"):
        select_rows(runs, ["adamx"])
    with pytest.raises(ConfigError, match=r"its rows: 'adamw', 'adam lr 3e-3'"):
        select_rows(runs, ["sgd"])


def test_a_row_that_train_would_refuse_stops_the_grid_before_any_run_trains(tmp_path):
    """The refused row is the last: without the check the first row trained before it was refused."""
    methods = {
        "fine": ("default", TINY),
        "refused": ("default", TINY | {"attention_kernel": "small_heads"}),  # heads of dim 16: no layer runs
    }
    runs = efficiency_runs(methods, [1.0], [0])
    with pytest.raises(
        ConfigError, match=r"^row 'refused @ 1': .*runs no layer of simplevit.*nothing of the grid has run$"
    ):
        run_grid(runs, tmp_path / "grid", progress=False)
    assert not (tmp_path / "grid").exists()
