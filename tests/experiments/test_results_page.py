"""docs/results.md is generated from the runs kept under results/, and its verdicts follow the intervals."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import statistics
from pathlib import Path

import pytest
import yaml

from convinit.cli import main
from convinit.config import save_config
from convinit.errors import ConfigError
from convinit.experiments.grid import expand
from convinit.experiments.results_page import (
    METRIC_NAMES,
    METRICS,
    find_metric,
    load_claims,
    metric_value,
    render,
    render_page,
)
from convinit.experiments.size_curves import figure_data, figure_name, kept_figure_data

REPO = Path(__file__).resolve().parents[2]


def test_the_page_in_the_repository_is_what_the_results_folder_gives():
    assert (REPO / "docs" / "results.md").read_text() == render(REPO / "results")


def fake_run(
    results: Path, label: str, seed: int, accuracies: list[float], extra: dict | None = None
) -> None:
    """A finished users-vit run (its real config) whose metrics hold `accuracies`, one per epoch."""
    spec = next(s for s in expand("users-vit", seeds=[seed]) if s.label == label)
    run = results / "users-vit" / spec.dirname
    run.mkdir(parents=True)
    save_config(spec.config, run / "config.yaml")
    rows = [{"epoch": e + 1, "test_acc": a, **(extra or {})} for e, a in enumerate(accuracies)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "finished.json").write_text(json.dumps(rows[-1]))
    (run / "experiment.json").write_text(json.dumps({"label": label, "seed": seed}))
    (run / "preprocessing.json").write_text(json.dumps({"train_images": 1000, "test_images": 10000}))


def claims(results: Path, **claim) -> None:
    entry = {"section": "S", "claim": "C", "paper": "P", "experiment": "users-vit", **claim}
    (results / "claims.yaml").write_text(yaml.safe_dump([entry]))


def claim_line(page: str) -> str:
    return next(line for line in page.splitlines() if line.startswith("| C |"))


@pytest.mark.parametrize(
    "impulse, expect, verdict",
    [
        ([80, 81, 82], "higher", "holds"),
        ([60, 61, 62], "higher", "does not hold"),
        ([70.5, 69.5, 71.0], "higher", "within noise"),
        ([70.5, 69.5, 71.0], "similar", "holds (within +-2)"),
        ([70.9, 71.2, 71.3], "similar", "holds (within +-2)"),  # differs from 0, but by less than the margin
        ([80, 81, 82], "similar", "does not hold"),
        ([60, 80, 72], "similar", "within noise (interval wider than +-2)"),  # holds 0: no evidence
        ([60, 61, 62], "lower", "holds"),
    ],
)
def test_the_verdict_follows_the_paired_interval_and_the_papers_direction(tmp_path, impulse, expect, verdict):
    for seed, (random_acc, impulse_acc) in enumerate(zip([70, 70.2, 70.4], impulse, strict=True)):
        fake_run(tmp_path, "random", seed, [50, random_acc])
        fake_run(tmp_path, "impulse", seed, [50, impulse_acc])
    claims(tmp_path, row="impulse", reference="random", expect=expect)
    line = claim_line(render(tmp_path))
    assert f"**{verdict}**" in line
    assert "fashion-mnist, 1,000 train / 10,000 test images" in line and "100 epochs" in line


def test_rows_not_run_or_short_of_seeds_get_no_verdict(tmp_path):
    claims(tmp_path, row="impulse", reference="random")
    assert "**not yet run**" in claim_line(render(tmp_path))
    for seed in (0, 1):
        fake_run(tmp_path, "random", seed, [70])
        fake_run(tmp_path, "impulse", seed, [80])
    assert "**no verdict yet (2 of 3 seeds run)**" in claim_line(render(tmp_path))


def test_a_claim_without_a_reference_is_judged_against_zero_with_its_own_metric(tmp_path):
    for seed in range(3):
        gates = {"gate/L0/H0": 0.8 + seed / 100, "gate/L1/H0": 0.2}
        fake_run(tmp_path, "random", seed, [70], extra=gates)
    claims(tmp_path, row="random", metric="gate_spread")
    line = claim_line(render(tmp_path))
    assert "**holds**" in line and "+0.61" in line


def test_a_claim_the_cpu_cannot_measure_says_why(tmp_path):
    (tmp_path / "claims.yaml").write_text(
        yaml.safe_dump([{"section": "S", "claim": "C", "paper": "P", "cpu": "why"}])
    )
    assert "**not measurable on a CPU: why**" in claim_line(render(tmp_path))


def test_a_claims_file_with_an_unknown_key_is_refused_in_one_line(tmp_path):
    claims(tmp_path, row="impulse", expected="higher")
    with pytest.raises(ConfigError, match="claim 1 must have section, claim, paper"):
        render(tmp_path)


def test_check_exits_1_on_a_stale_page_and_0_once_rewritten(tmp_path):
    claims(tmp_path, row="impulse", reference="random")
    page = tmp_path / "results.md"
    page.write_text("stale\n")
    args = ["results", "--results", str(tmp_path), "--out", str(page)]
    assert main([*args, "--check"]) == 1
    assert main(args) == 0
    assert main([*args, "--check"]) == 0


def test_a_tracked_change_is_the_end_minus_step_0_and_needs_the_step_0_row(tmp_path):
    for seed in range(3):
        run = tmp_path / "users-vit" / "random" / f"seed{seed}"
        fake_run(tmp_path, "random", seed, [70, 71])
        rows = [{"epoch": 0, "test_acc": 10, "init_quality/target_mass": 0.8},
                {"epoch": 1, "test_acc": 71, "init_quality/target_mass": 0.3 + seed / 100}]  # fmt: skip
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (run / "finished.json").write_text(json.dumps(rows[-1]))
    claims(tmp_path, row="random", expect="lower", metric="tracked_change:init_quality/target_mass")
    line = claim_line(render(tmp_path))
    assert "**holds**" in line and "-0.49" in line


def test_every_grid_row_shows_whether_it_fitted_its_training_set(tmp_path):
    for seed in range(3):
        fake_run(tmp_path, "random", seed, [50, 70], extra={"train_acc": 88.0 + seed})
    claims(tmp_path, row="random", metric="final_train_acc")
    page = render(tmp_path)
    grid_row = next(line for line in page.splitlines() if line.startswith("| random |"))
    assert "| 89.0 |" in grid_row  # the mean over seeds of the last epoch's training accuracy
    assert "random: 89.00 +- 1.00 (3 seeds)" in claim_line(page)  # also a metric a claim can be judged on


def test_every_grid_row_shows_its_gates_and_first_layer_nonlocality_at_the_end(tmp_path):
    for seed in range(3):
        ends = {"gate/L0/H0": 0.7, "gate/L1/H0": 0.5 + seed / 10, "nonlocality/L0": 1.5, "nonlocality/L1": 3}
        fake_run(tmp_path, "impulse", seed, [70], extra=ends)
        fake_run(tmp_path, "random", seed, [70])
    claims(tmp_path, row="impulse", reference="random")
    page = render(tmp_path)
    rows = {
        line.split(" | ")[0]: line for line in page.splitlines() if line.startswith("| ") and "seeds)" in line
    }
    assert rows["| impulse"].endswith("| 0.65 | 1.50 |")  # gates: mean of 0.7 and 0.6; the first layer's 1.5
    assert rows["| random"].endswith("| - | - |")  # not tracked: no figure, not a zero


def test_the_users_vit_table_of_own_models_md_is_the_kept_runs():
    """docs/own-models.md repeats the users-vit rows for its readers; they must be the runs under results/."""
    from convinit.experiments.report import find_runs
    from convinit.experiments.results_page import seed_values

    records = find_runs(REPO / "results" / "users-vit")
    text = (REPO / "docs" / "own-models.md").read_text()
    table = text[text.index("| init | final test accuracy (%) | per seed |") :].split("\n\n")[0]
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    assert len(rows) == len({r.label for r in records}) == 4
    for label, mean_std, per_seed in rows:
        values = seed_values(records, label.removeprefix("| "), "final_acc")
        numbers = [values[seed] for seed in sorted(values)]
        assert mean_std == f"{statistics.fmean(numbers):.2f} +- {statistics.stdev(numbers):.2f}", label
        assert per_seed.removesuffix(" |") == ", ".join(f"{n:.2f}" for n in numbers), label


def test_a_claim_with_a_ceiling_gives_the_share_of_the_gap_its_row_closes(tmp_path):
    for seed in range(3):
        fake_run(tmp_path, "random", seed, [70.0])
        fake_run(tmp_path, "impulse", seed, [72.0 + seed])
        fake_run(tmp_path, "scaled-position", seed, [78.0])
    claims(tmp_path, row="impulse", reference="random", ceiling="scaled-position")
    line = claim_line(render(tmp_path))
    assert "+3.00 [" in line and "share of the gap to scaled-position: 0.38 [" in line and "**holds**" in line


@pytest.mark.parametrize(
    "ceiling, reference, message",
    [
        ("no such row", "random", "ceiling 'no such row' is no row of users-vit"),
        ("scaled-position", None, "has a ceiling but no reference"),
    ],
)
def test_a_ceiling_that_is_no_row_or_has_no_reference_is_refused_in_one_line(
    tmp_path, ceiling, reference, message
):
    claims(tmp_path, row="impulse", reference=reference, ceiling=ceiling)
    with pytest.raises(ConfigError, match=re.escape(message)):
        render(tmp_path)


def test_a_claims_note_is_shown_under_its_sections_table(tmp_path):
    claims(tmp_path, row="impulse", reference="random", note="Random has not fitted its training set.")
    page = render(tmp_path)
    table_end = page.index(claim_line(page)) + len(claim_line(page))
    assert page.index("- Random has not fitted its training set.") > table_end
    assert page.index("- Random has not fitted its training set.") < page.index("Made by:")


def test_a_claim_with_overrides_reads_its_own_folder_and_states_them_in_setting_and_command(tmp_path):
    for seed in range(3):
        fake_run(tmp_path, "random", seed, [50, 70 + seed])  # the grid as shipped, in results/users-vit
    claims(tmp_path, row="random", overrides={"epochs": 3}, folder="users-vit-3-epochs")
    line = claim_line(render(tmp_path))
    assert "users-vit with epochs=3:" in line and ", 3 epochs |" in line
    assert "**not yet run**" in line  # the shipped grid's runs are not the changed grid's
    command = "convinit reproduce users-vit --scale small --out results/users-vit-3-epochs threads=1 epochs=3"
    assert command in render(tmp_path)


def test_a_claim_with_overrides_but_no_folder_is_refused_in_one_line(tmp_path):
    claims(tmp_path, row="random", overrides={"epochs": 3})
    with pytest.raises(ConfigError, match="overrides but no folder"):
        render(tmp_path)


def test_every_claim_metric_is_in_the_registry_and_the_claims_file_header_names_each():
    """The header of results/claims.yaml is typed by hand: it must list exactly the metrics METRICS reads."""
    header = " ".join(
        line.removeprefix("#").strip()
        for line in (REPO / "results" / "claims.yaml").read_text().splitlines()
        if line.startswith("#")
    )
    listed = re.search(r"metric \(([^)]*)\)", header)
    assert listed, "the header of results/claims.yaml no longer lists the metrics as 'metric (a, b, ...)'"
    assert tuple(listed.group(1).split(", ")) == METRIC_NAMES
    for claim in load_claims(REPO / "results"):  # every claim of the repository names a registered metric
        assert find_metric(claim.metric)[0] in METRICS.values(), claim.claim
    assert all(entry.description and "\n" not in entry.description for entry in METRICS.values())


@pytest.mark.parametrize(
    "metric, message",
    [
        ("final_accuracy", "unknown claim metric 'final_accuracy'; did you mean 'final_acc'"),
        ("tracked_ends:init_quality/target_mass", "did you mean 'tracked_end:KEY'"),
        ("gate_spread:1", "unknown claim metric 'gate_spread:1'"),
        ("acc_at_epoch:last", "must be acc_at_epoch:N"),
        ("tracked_end:", "must be tracked_end:KEY"),
    ],
)
def test_an_unknown_claim_metric_is_refused_when_the_claims_are_read(tmp_path, monkeypatch, metric, message):
    from convinit.experiments import results_page

    def no_runs(folder):
        raise AssertionError(f"{folder} read before the claims were checked")

    monkeypatch.setattr(results_page, "find_runs", no_runs)
    (tmp_path / "users-vit").mkdir()
    claims(tmp_path, row="random", metric=metric)
    with pytest.raises(ConfigError, match=re.escape(message)) as refused:
        render(tmp_path)
    assert str(refused.value).startswith(f"{tmp_path / 'claims.yaml'}: claim 1 ('C'): ")
    assert "\n" not in str(refused.value)
    if message.startswith("unknown") or "did you mean" in message:
        assert str(refused.value).endswith(f"(known: {', '.join(METRIC_NAMES)})")


def test_each_registered_metric_reads_the_figure_the_old_if_chain_read(tmp_path):
    """One run, every metric: the values the page is built from."""
    rows = [
        {"epoch": 0, "test_acc": 10.0, "tracked": 0.8, "nonlocality/L0/H0": 1.0, "nonlocality/L1/H0": 2.0},
        {"epoch": 1, "test_acc": 60.0, "train_acc": 55, "tracked": 0.5, "gate/L0/H0": 0.9, "gate/L1/H0": 0.3,
         "nonlocality/L0/H0": 1.5, "nonlocality/L1/H0": 3.0},
    ]  # fmt: skip
    fake_run(tmp_path, "random", 0, [60.0])
    run = tmp_path / "users-vit" / "random" / "seed0"
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from convinit.experiments.report import find_runs

    (record,) = find_runs(tmp_path / "users-vit")
    expected = {
        "final_acc": 60.0,
        "final_train_acc": 55.0,
        "acc_at_epoch:0": 10.0,
        "acc_at_epoch:2": None,
        "tracked_end:tracked": 0.5,
        "tracked_end:missing": None,
        "tracked_change:tracked": pytest.approx(-0.3),
        "gate_spread": pytest.approx(0.6),
        "mean_gate": pytest.approx(0.6),
        "nonlocality_growth": pytest.approx(0.75),
    }
    assert {metric: metric_value(record, metric) for metric in expected} == expected


def test_a_cut_last_metrics_line_does_not_make_the_epoch_before_the_final_figure(tmp_path):
    fake_run(tmp_path, "random", 0, [50.0, 60.0, 70.0])
    metrics = tmp_path / "users-vit" / "random" / "seed0" / "metrics.jsonl"
    metrics.write_text(metrics.read_text()[:-10])  # a kill mid-append cut the last row
    from convinit.experiments.report import find_runs

    with pytest.warns(UserWarning, match="line\\(s\\) 3 are damaged"):
        (record,) = find_runs(tmp_path / "users-vit")
    assert metric_value(record, "final_acc") == 70.0  # finished.json's epoch 3, not epoch 2's 60
    assert [row["epoch"] for row in record.metrics] == [1, 2, 3]


def test_a_finished_record_that_disagrees_with_the_metrics_is_named_and_left_out(tmp_path):
    for seed in range(3):
        fake_run(tmp_path, "random", seed, [70.0 + seed])
        fake_run(tmp_path, "impulse", seed, [80.0 + seed])
    finished = tmp_path / "users-vit" / "impulse" / "seed2" / "finished.json"
    finished.write_text(json.dumps({"epoch": 1, "test_acc": 99.0}))
    claims(tmp_path, row="impulse", reference="random")
    page = render(tmp_path)
    assert "**no verdict yet (2 of 3 seeds run)**" in claim_line(page)
    assert (
        "- `" + f"{tmp_path.name}/users-vit/impulse/seed2`: metrics.jsonl gives epoch 1 test_acc 82.0" in page
    )


@pytest.mark.parametrize("missing", ["metrics.jsonl", "config.yaml"])
def test_a_finished_run_folder_without_its_metrics_or_config_is_named_on_the_page(tmp_path, missing):
    for seed in range(3):
        fake_run(tmp_path, "random", seed, [70.0 + seed])
        fake_run(tmp_path, "impulse", seed, [80.0 + seed])
    (tmp_path / "users-vit" / "impulse" / "seed2" / missing).unlink()
    claims(tmp_path, row="impulse", reference="random")
    page = render(tmp_path)
    assert "**no verdict yet (2 of 3 seeds run)**" in claim_line(page)
    folder = f"{tmp_path.name}/users-vit/impulse/seed2"
    assert (
        f"- `{folder}`: it is finished but has no {missing}; restore it from a copy or rerun the run" in page
    )


REFUSED_CLAIM_FIELDS = {  # a hand-edited claims.yaml value of the wrong type: (field, value, message)
    "claim a number": ("claim", 5, "claim 1: field 'claim' must be text, got 5"),
    "paper a list": ("paper", [71.3], "field 'paper' must be text (the paper's number or statement)"),
    "paper a boolean": ("paper", True, "field 'paper' must be text"),
    "section a list": ("section", ["a"], "field 'section' must be text"),
    "metric a number": ("metric", 5, "field 'metric' must be text, got 5"),
    "metric epoch not a count": ("metric", "acc_at_epoch:abc", "must be acc_at_epoch:N"),
    "metric epoch a non-ASCII digit": ("metric", "acc_at_epoch:²", "must be acc_at_epoch:N"),
    "expect null": ("expect", None, "field 'expect' must be text, got None"),
    "folder a number": ("folder", 5, "field 'folder' must name one folder under results/, got 5"),
    "folder a path": ("folder", "../elsewhere", "field 'folder' must name one folder under results/"),
    "row a list": ("row", [1, 2], "field 'row' must be text, got [1, 2]"),
    "ceiling a number": ("ceiling", 3, "field 'ceiling' must be text, got 3"),
    "margin text": ("margin", "abc", "field 'margin' must be a finite number >= 0 (points), got 'abc'"),
    "margin negative": ("margin", -1, "field 'margin' must be a finite number >= 0 (points), got -1"),
    "margin nan": ("margin", float("nan"), "field 'margin' must be a finite number >= 0 (points), got nan"),
    "margin a boolean": ("margin", True, "field 'margin' must be a finite number >= 0"),
    "note a list": ("note", ["a", "b"], "field 'note' must be text, got ['a', 'b']"),
    "overrides text": ("overrides", "epochs=100", "field 'overrides' must map config keys to values"),
    "overrides a list": ("overrides", ["epochs=100"], "field 'overrides' must map config keys to values"),
}


@pytest.mark.parametrize("case", REFUSED_CLAIM_FIELDS)
def test_a_claim_field_of_the_wrong_type_is_refused_in_one_line_naming_the_claim_and_field(tmp_path, case):
    field, value, message = REFUSED_CLAIM_FIELDS[case]
    claims(tmp_path, **{"row": "impulse", "reference": "random", field: value})
    with pytest.raises(ConfigError, match=re.escape(message)) as refused:
        render(tmp_path)
    assert str(refused.value).startswith(f"{tmp_path / 'claims.yaml'}: claim 1")
    assert "\n" not in str(refused.value)


def test_a_papers_number_written_bare_is_shown_as_its_text(tmp_path):
    claims(tmp_path, row="impulse", reference="random", paper=71.3)
    assert claim_line(render(tmp_path)).startswith("| C | 71.3 |")


@pytest.mark.parametrize(
    "overrides, command_item",
    [
        ({"track": ["init_quality"]}, "'track=[init_quality]'"),
        ({"model_args": {"depth": 2}}, "'model_args={depth: 2}'"),
    ],
)
def test_list_or_mapping_valued_overrides_give_a_page_and_a_command_reproduce_reads(
    tmp_path, overrides, command_item
):
    claims(tmp_path, row="impulse", reference="random", overrides=overrides, folder="changed")
    page = render(tmp_path)
    command = next(line for line in page.splitlines() if line.startswith("convinit reproduce users-vit"))
    assert command.endswith(f"threads=1 {command_item}")
    from convinit.config import parse_overrides  # the command's items are what the claim's overrides say

    assert parse_overrides([shlex.split(command)[-1]]) == overrides


def test_a_reference_that_is_no_row_of_its_experiment_is_refused_naming_the_rows_that_are(tmp_path):
    claims(tmp_path, row="impulse", reference="randon")
    with pytest.raises(
        ConfigError, match="reference 'randon' is no row of users-vit; did you mean 'random'"
    ) as refused:
        render(tmp_path)
    assert "(its rows: random, scaled-position, impulse, mimetic (Trockman & Kolter))" in str(refused.value)


def test_an_init_report_holding_a_list_where_a_mapping_goes_shows_no_start_figures(tmp_path):
    for seed in range(3):
        fake_run(tmp_path, "random", seed, [70.0 + seed])
        report = tmp_path / "users-vit" / "random" / f"seed{seed}" / "init_report.json"
        report.write_text(json.dumps({"real_pass_held_out": [0.5, 0.6]}))
    claims(tmp_path, row="random")
    grid_row = next(line for line in render(tmp_path).splitlines() if line.startswith("| random |"))
    assert grid_row.endswith("| - | - |")


def test_results_out_on_a_directory_names_it_and_asks_for_a_file_path(tmp_path, capsys):
    claims(tmp_path, row="impulse", reference="random")
    assert main(["results", "--results", str(tmp_path), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (
        f"--out {tmp_path} is a directory; give the page's file path (e.g. {tmp_path / 'results.md'})" in err
    )
    assert ".tmp" not in err


def test_results_finds_the_checkouts_results_from_any_directory(tmp_path, monkeypatch):
    """`convinit results --check` outside the checkout root reads the checkout's results/ and docs page."""
    from convinit.experiments.results_page import results_paths

    monkeypatch.chdir(tmp_path)
    assert results_paths() == (REPO / "results", REPO / "docs" / "results.md")
    assert results_paths(tmp_path / "mine") == (tmp_path / "mine", tmp_path / "docs" / "results.md")


def test_results_outside_any_checkout_asks_for_the_results_dir(tmp_path, monkeypatch, capsys):
    from convinit.experiments import results_page

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(results_page, "__file__", str(tmp_path / "site-packages/convinit/experiments/x.py"))
    assert main(["results", "--check"]) == 2
    assert "pass --results-dir DIR (the folder holding claims.yaml" in capsys.readouterr().err
    (tmp_path / "kept").mkdir()
    claims(tmp_path / "kept", row="impulse", reference="random")
    assert main(["results", "--results-dir", str(tmp_path / "kept"), "--out", str(tmp_path / "p.md")]) == 0


def fake_grid_run(
    results: Path,
    experiment: str,
    label: str,
    seed: int,
    accuracy: float,
    folder: str = "",
    images: int = 1000,
) -> None:
    """A finished run of any grid's row (its real config), its one epoch at `accuracy`, in results/<folder>
    (default: the experiment's), trained on `images` images."""
    spec = next(s for s in expand(experiment, "small", seeds=[seed]) if s.label == label)
    run = results / (folder or experiment) / spec.dirname
    run.mkdir(parents=True)
    save_config(spec.config, run / "config.yaml")
    row = {"epoch": 1, "test_acc": accuracy}
    (run / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    (run / "finished.json").write_text(json.dumps(row))
    (run / "experiment.json").write_text(json.dumps({"label": label, "seed": seed}))
    (run / "preprocessing.json").write_text(json.dumps({"train_images": images, "test_images": 10000}))


def test_a_reference_from_another_grid_is_paired_by_seed_and_both_grids_commands_are_shown(tmp_path):
    for seed in range(
        3
    ):  # heads-vs-cnn's CNN row is vit-vs-cnn's to the key: its kept runs are the reference
        fake_grid_run(tmp_path, "heads-vs-cnn", "ConvMixer, 4 filters", seed, 82.0 + seed)
        fake_grid_run(tmp_path, "vit-vs-cnn", "ConvMixer (CNN)", seed, 81.0 + seed)
    claims(
        tmp_path,
        experiment="heads-vs-cnn",
        row="ConvMixer, 4 filters",
        reference="ConvMixer (CNN)",
        reference_grid="vit-vs-cnn",
        expect="similar",
    )
    page = render(tmp_path)
    line = claim_line(page)
    assert "ConvMixer (CNN): 82.00 +- 1.00 (3 seeds)" in line and "+1.00 [" in line
    made_by = page[page.index("Made by:") :]
    assert "reproduce heads-vs-cnn --scale small --out results/heads-vs-cnn" in made_by
    assert "reproduce vit-vs-cnn --scale small --out results/vit-vs-cnn" in made_by
    assert "### heads-vs-cnn" in page and "### vit-vs-cnn" in page  # both grids' rows in the tables


@pytest.mark.parametrize(
    "claim, message",
    [
        (
            {"reference": "ConvMixer (CNN), DeiT recipe", "reference_grid": "vit-vs-cnn"},
            "no run heads-vs-cnn would make (nearest row differs in cutmix, mixup, random_erasing, "
            "repeated_aug)",
        ),
        (
            {"reference": "no such row", "reference_grid": "vit-vs-cnn"},
            "reference 'no such row' is no row of vit-vs-cnn",
        ),
        (
            {
                "reference": "ConvMixer (CNN)",
                "reference_grid": "vit-vs-cnn",
                "overrides": {"per_class": 30},
                "folder": "x",
            },
            "has overrides and a reference_grid but no reference_folder",
        ),
    ],
)
def test_a_reference_grid_row_that_the_claims_grid_would_not_make_is_refused_in_one_line(
    tmp_path, claim, message
):
    claims(tmp_path, experiment="heads-vs-cnn", row="ConvMixer, 4 filters", **claim)
    with pytest.raises(ConfigError, match=re.escape(message)):
        render(tmp_path)


def curve_claims(results: Path, sizes: dict[str, int]) -> None:
    """users-vit's impulse against random at each size (folder: images), one claim per size, one curve."""
    entries = []
    for folder, images in sizes.items():
        for seed in range(3):
            fake_grid_run(results, "users-vit", "random", seed, 60.0 + images / 100, folder, images)
            fake_grid_run(results, "users-vit", "impulse", seed, 60.0 + seed + images / 50, folder, images)
        entries.append(
            {
                "section": "S",
                "claim": f"C {images}",
                "paper": "P",
                "experiment": "users-vit",
                "row": "impulse",
                "reference": "random",
                "overrides": {"per_class": images // 10},
                "folder": folder,
                "curve": "Impulse against random by training images",
            }
        )
    (results / "claims.yaml").write_text(yaml.safe_dump(entries))


def test_claims_sharing_a_curve_give_one_table_and_one_figure_of_both_rows_by_training_images(tmp_path):
    curve_claims(tmp_path, {"users-vit-300": 300, "users-vit-100": 100})
    page = render(tmp_path)
    table = page[page.index("Impulse against random by training images:") :]
    assert table.index("| 100 | 63.00 [") < table.index("| 300 | 67.00 [")  # by size, not the file's order
    assert "| 300 | 67.00 [64.52, 69.48] | 63.00 [63.00, 63.00] | +4.00 [+1.52, +6.48] | 3 |" in table
    assert (
        "![Impulse against random by training images](images/impulse-against-random-by-training-images.png)"
        in page
    )
    out = tmp_path / "docs" / "results.md"  # a folder not yet made: made
    args = ["results", "--results", str(tmp_path), "--out", str(out)]
    assert main(args) == 0
    figure = out.parent / "images" / "impulse-against-random-by-training-images.png"
    points = json.loads(kept_figure_data(figure))
    assert [p["images"] for p in points] == [300, 100] and points[0]["difference"] == [4.0, 1.52, 6.48]
    assert main([*args, "--check"]) == 0


def test_check_exits_1_when_a_figure_was_drawn_from_other_runs(tmp_path, capsys):
    curve_claims(tmp_path, {"users-vit-300": 300, "users-vit-100": 100})
    out = tmp_path / "docs" / "results.md"
    out.parent.mkdir()
    args = ["results", "--results", str(tmp_path), "--out", str(out)]
    assert main(args) == 0
    shutil.rmtree(tmp_path / "users-vit-100" / "impulse" / "seed2")  # a run left out: the figure is stale
    page = render(tmp_path)
    out.write_text(page)  # the page rewritten by hand, the figure not
    assert main([*args, "--check"]) == 1
    assert "impulse-against-random-by-training-images.png: differs from what" in capsys.readouterr().out


def test_the_kept_figures_hold_the_points_the_kept_runs_give():
    _, curves = render_page(REPO / "results")
    assert curves, "no claim of results/claims.yaml names a curve"
    for name, points in curves.items():
        assert kept_figure_data(REPO / "docs" / figure_name(name)) == figure_data(points), name


def test_the_budgets_heads_vs_cnns_note_states_are_its_rows_models():
    """Parameters and forward FLOPs of one image, as torch counts them, of each shape the note names."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from convinit.train.validation import validate

    note = next(c.note for c in load_claims(REPO / "results") if c.experiment == "heads-vs-cnn" and c.note)
    rows = {
        "recipe, 4 heads": "width 64, depth 4 (any head count)",  # with the recipe's blend and projection
        "recipe, width 56, depth 6, 14 heads": "width 56, depth 6:",
        "recipe, width 48, depth 8, 12 heads": "width 48, depth 8:",
        "ConvMixer (CNN)": "ConvMixer",
        "ConvMixer, 4 filters": "with 4 filters",
    }
    for spec in expand("heads-vs-cnn", "small", seeds=[0]):
        label = spec.label
        if label not in rows:
            continue
        model = validate(spec.config).model.build()
        with FlopCounterMode(display=False) as counter:
            model(torch.zeros(1, 1, 28, 28))
        parameters = sum(p.numel() for p in model.parameters())
        stated = f"{rows[label]} {parameters / 1e6:.3f} M / {counter.get_total_flops() / 1e6:.1f} M"
        assert stated in " ".join(note.split()), f"{label}: the note should say {stated!r}"
