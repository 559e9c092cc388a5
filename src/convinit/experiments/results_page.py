"""docs/results.md, generated: every headline claim of both papers, measured at CPU scale, from data.

The claim grids write their runs (config, provenance, metrics, init report; no checkpoints) under a
results folder kept in the repository, one folder per experiment (`results/<experiment>/<row>/seed<n>`).
`results/claims.yaml` lists the claims: the paper's statement and number, the experiment and row that
test it, the reference row it is paired with and the direction the paper says (and, where a grid runs
with keys changed, those keys and the folder its runs go to; where a row is measured against a ceiling
such as a CNN, that row, for the share of the reference-to-ceiling gap it closes). `convinit results`
reads both and writes the page; a test checks that the page in the repository is what it writes, so no
figure on it is typed by hand.

Per claim: the row's figure over its seeds (mean +- std), the paired per-seed difference against the
reference with its 95 % t interval (`convinit.experiments.paired`), and a verdict from that interval:
`holds` (it excludes 0 on the paper's side), `does not hold` (it excludes 0 on the other side), `within
noise` (it contains 0). A claim of no difference ("about as good") is an equivalence claim: it holds when
the whole interval lies within +-margin of 0 (the claim's `margin`, 2 points unless it says), does not hold
when the interval excludes 0 and leaves that band, and is within noise when the interval holds 0 but is
too wide to show equivalence (a wide interval is not evidence of no difference). Fewer than three paired
seeds give no verdict; rows not yet run say so with the command that runs them.

claims.yaml is edited by hand: every field is checked for its type when it is read (and a row or reference
must be a row of its experiment), or the page is refused in one line naming the claim and the field. A
run's final figure is the row its `finished.json` records (`convinit.experiments.report.read_run`); every
run folder that gives no figure is named on the page with the reason.
"""

from __future__ import annotations

import json
import math
import shlex
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from convinit.config import read_yaml
from convinit.errors import ConfigError
from convinit.experiments.grid import expand, flatten
from convinit.experiments.paired import GapShare, PairedDifference, gap_share, paired_difference
from convinit.experiments.report import CellResult, find_runs, read_json
from convinit.experiments.size_curves import SizePoint, curve_table, figure_name
from convinit.naming.did_you_mean import suggestion
from convinit.runs.metrics import loss_change_at_end
from convinit.system.read_back import short_repr

CLAIMS_FILE = "claims.yaml"
MIN_SEEDS = 3  # the fewest paired seeds a verdict is drawn from
END_MASS = "init_quality/target_mass"  # track=[init_quality]: the bias left at the end
GRID_HEADER = (
    "| row | final test accuracy (%) | per seed | final train accuracy (%) | fit: unaugmented train accuracy "
    "(%) / loss change, last tenth | start: held-apart mass / worst row (min) / rows on target "
    "| end: target mass | end: mean gate | end: non-locality, first layer |\n"
    "| --- | ---: | --- | ---: | --- | --- | --- | --- | --- |"
)
DIRECTIONS = ("higher", "lower", "similar")
EQUIVALENCE_MARGIN = 2.0  # points: "about as good" means the paired interval lies within +-2 of 0


@dataclass(frozen=True)
class Claim:
    """One row of the page: a paper's statement and the runs that test it."""

    section: str
    claim: str
    paper: str
    experiment: str | None = None
    row: str | None = None
    reference: str | None = None
    expect: str = "higher"
    metric: str = "final_acc"
    margin: float = EQUIVALENCE_MARGIN  # for expect: similar, the band the interval must lie in
    cpu: str | None = None  # why it cannot be measured on a CPU, when it cannot
    note: str | None = None  # what a reader must know to read the row (shown under its section's table)
    overrides: dict[str, Any] | None = None  # the grid run with these keys changed (e.g. {epochs: 100}) ...
    folder: str | None = None  # ... into results/<folder> (needed with overrides); else results/<experiment>
    ceiling: str | None = None  # a row the reference is trying to reach: the page gives the share of that gap
    reference_grid: str | None = None  # reference and ceiling are rows of this grid (run once, shared) ...
    reference_folder: str | None = None  # ... in results/<reference_folder>; else results/<reference_grid>
    curve: str | None = None  # claims sharing it: the same rows at several training-set sizes

    @property
    def runs_folder(self) -> str:
        return self.folder or self.experiment or ""

    @property
    def reference_runs_folder(self) -> str:
        """Where the reference and ceiling runs are: the claim's own folder unless they are another grid's."""
        return self.reference_folder or self.reference_grid or self.runs_folder

    def overrides_text(self, for_shell: bool = False) -> str:
        """`key=value` items as `convinit reproduce` reads them back (flow YAML; quoted for a shell)."""
        items = [f"{key}={flow_value(value)}" for key, value in (self.overrides or {}).items()]
        return " ".join(shlex.quote(item) if for_shell else item for item in items)

    def command(self) -> str:
        if self.experiment is None:
            return ""
        return reproduce_command(self.experiment, self.runs_folder, self.overrides_text(for_shell=True))

    def commands(self) -> list[str]:
        """The claim's grid command, and the reference grid's where its reference is another grid's rows."""
        if self.reference_grid is None:
            return [self.command()]
        shared = reproduce_command(self.reference_grid, self.reference_runs_folder, self.overrides_text(True))
        return [self.command(), shared]


def reproduce_command(experiment: str, folder: str, overrides: str) -> str:
    out = f"--scale small --out results/{folder} threads=1"
    return f"convinit reproduce {experiment} {out} {overrides}".rstrip()


def flow_value(value: Any) -> str:
    """A YAML value as one line of flow YAML (`3`, `[init_quality]`, `{dim: 32}`)."""
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip().removesuffix("...").strip()


def results_paths(results: Path | None = None, out: Path | None = None) -> tuple[Path, Path]:
    """The results folder and the page: `results` as given, else ./results where it holds the claims
    file, else the results/ of the checkout this package is installed from (editable installs), so that
    `convinit results --check` works from any directory; the page defaults to docs/results.md beside it."""
    if results is None:
        here, checkout = Path("results"), Path(__file__).resolve().parents[3] / "results"
        results = next((p for p in (here, checkout) if (p / CLAIMS_FILE).is_file()), None)
        if results is None:
            raise ConfigError(
                f"no results folder here ({here / CLAIMS_FILE} not found) nor in the checkout convinit is "
                "installed from; pass --results-dir DIR (the folder holding claims.yaml and the kept runs)"
            )
    return results, out if out is not None else results.parent / "docs" / "results.md"


def load_claims(results: Path) -> list[Claim]:
    """The claims of `results/claims.yaml`, each checked for its keys, the type of every field, its direction,
    metric and margin, and that its row and reference are rows of its experiment."""
    path = results / CLAIMS_FILE
    if not path.is_file():
        raise ConfigError(f"{path} not found: the results folder must hold the claims file")
    entries = read_yaml(path) or []
    if not isinstance(entries, list):
        raise ConfigError(f"{path} must be a list of claims")
    fields = set(Claim.__dataclass_fields__)
    claims = []
    for index, entry in enumerate(entries):
        if (
            not isinstance(entry, dict)
            or set(entry) - fields
            or not {"section", "claim", "paper"} <= set(entry)
        ):
            raise ConfigError(f"{path}: claim {index + 1} must have section, claim, paper and only {fields}")
        name = f"claim {index + 1}" + (
            f" ({short_repr(entry['claim'])})" if isinstance(entry["claim"], str) else ""
        )
        try:
            claims.append(checked_claim(entry))
        except ConfigError as error:
            raise ConfigError(f"{path}: {name}: {error}") from None
    return claims


CLAIM_TEXT_FIELDS = (
    "section",
    "claim",
    "experiment",
    "row",
    "reference",
    "ceiling",
    "reference_grid",
    "curve",
    "expect",
    "metric",
    "cpu",
    "note",
)


def checked_claim(entry: dict[str, Any]) -> Claim:
    """A claims.yaml entry as a Claim, every field of the type the page reads it as (the file is edited by
    hand); ConfigError naming the field otherwise."""
    entry = dict(entry)
    paper = entry["paper"]
    if isinstance(paper, int | float) and not isinstance(paper, bool) and math.isfinite(paper):
        entry["paper"] = str(paper)  # the paper's number, written bare (`paper: 71.3`), is shown as it reads
    elif not isinstance(paper, str):
        raise ConfigError(
            f"field 'paper' must be text (the paper's number or statement), got {short_repr(paper)}"
        )
    for key in CLAIM_TEXT_FIELDS:
        if key in entry and not (isinstance(entry[key], str) or (entry[key] is None and key in OPTIONAL)):
            raise ConfigError(f"field {key!r} must be text, got {short_repr(entry[key])}")
    for key in ("folder", "reference_folder"):
        folder = entry.get(key)
        if folder is not None and not (isinstance(folder, str) and folder and Path(folder).name == folder):
            raise ConfigError(f"field {key!r} must name one folder under results/, got {short_repr(folder)}")
    margin = entry.get("margin", EQUIVALENCE_MARGIN)
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 <= margin < math.inf:
        raise ConfigError(f"field 'margin' must be a finite number >= 0 (points), got {short_repr(margin)}")
    overrides = entry.get("overrides")
    if overrides is not None and not (
        isinstance(overrides, dict) and all(isinstance(k, str) for k in overrides)
    ):
        raise ConfigError(
            f"field 'overrides' must map config keys to values (e.g. {{epochs: 100}}), "
            f"got {short_repr(overrides)}"
        )
    claim = Claim(**entry)
    if claim.expect not in DIRECTIONS:
        raise ConfigError(f"expects {claim.expect!r}; use one of {DIRECTIONS}")
    find_metric(claim.metric)  # a mistyped metric is refused before any run is read
    if claim.overrides and not claim.folder:
        raise ConfigError("has overrides but no folder: add one")
    if claim.overrides and claim.reference_grid and not claim.reference_folder:
        raise ConfigError("has overrides and a reference_grid but no reference_folder: add one")
    if claim.ceiling is not None and claim.reference is None:
        raise ConfigError("has a ceiling but no reference: the gap it measures is reference to ceiling")
    if claim.experiment is not None:
        check_rows(claim)
    elif claim.reference_grid is not None:
        raise ConfigError("has a reference_grid but no experiment: the reference is paired with a grid's row")
    return claim


def check_rows(claim: Claim) -> None:
    """The row is a row of the claim's grid; reference and ceiling rows of theirs. A reference_grid's row must
    be a run the claim's grid would make itself (the same config to the key), so the pairing is fair."""
    rows = row_configs(claim.experiment or "", overrides_key(claim))
    shared = row_configs(claim.reference_grid, overrides_key(claim)) if claim.reference_grid else rows
    for key, grid_rows in (("row", rows), ("reference", shared), ("ceiling", shared)):
        label = getattr(claim, key)
        if label is None:
            continue
        if label not in grid_rows:
            grid = grid_words(claim) if grid_rows is rows else str(claim.reference_grid)
            raise ConfigError(
                f"{key} {label!r} is no row of {grid}{suggestion(label, list(grid_rows))} "
                f"(its rows: {', '.join(grid_rows)}); name one of them"
            )
        if grid_rows is not rows and shared[label] not in rows.values():
            differs = min((config_differences(shared[label], c) for c in rows.values()), key=len)
            raise ConfigError(
                f"{key} {label!r} of {claim.reference_grid} is no run {claim.experiment} would make (nearest "
                f"row differs in {', '.join(differs)}); pair rows of grids with the same base settings"
            )


def config_differences(one: dict[str, Any], other: dict[str, Any]) -> list[str]:
    return sorted(key for key in one.keys() | other.keys() if one.get(key) != other.get(key))


OPTIONAL = ("experiment", "row", "reference", "ceiling", "cpu", "note", "curve")  # text, or null for none


def metric_value(record: CellResult, metric: str) -> float | None:
    """A run's figure for a claim metric, read by its entry in METRICS (one table, so the names a claim may
    use, the code that reads them and the list in results/claims.yaml cannot drift apart)."""
    entry, argument = find_metric(metric)
    return entry.read(record, argument)


@dataclass(frozen=True)
class Metric:
    """How a run gives one claim metric's figure, and what that figure is, for a reader."""

    read: Callable[[CellResult, str], float | None]  # (run, the text after the prefix; "" for a plain name)
    description: str
    argument: str = ""  # the parameter a prefix takes, as results/claims.yaml names it (N, KEY)
    accepts: Callable[[str], bool] = bool  # whether a parameter is one this metric can read


def find_metric(metric: str) -> tuple[Metric, str]:
    """The METRICS entry of `metric` and its parameter, or a ConfigError naming the known metrics."""
    name, colon, argument = metric.partition(":")
    entry = METRICS.get(name + colon)
    if entry is None:
        hint = suggestion(name, METRIC_NAMES)
        raise ConfigError(f"unknown claim metric {metric!r}{hint} (known: {', '.join(METRIC_NAMES)})")
    if colon and not entry.accepts(argument):
        raise ConfigError(f"claim metric {metric!r} must be {name}:{entry.argument}: {entry.description}")
    return entry, argument


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def final_train_acc(record: CellResult, _: str) -> float | None:
    """The last epoch's running training accuracy, as trained (augmented)."""
    return number(record.metrics[-1].get("train_acc"))


def fit_acc(record: CellResult, _: str) -> float | None:
    """The model on its own training images, unaugmented, after the last epoch: whether it fitted them."""
    return number(record.metrics[-1].get("fit_acc"))


def late_loss_change(record: CellResult, _: str) -> float | None:
    """The training loss of the last epoch minus that of the epoch a tenth of the run earlier (at least
    one): near 0 where the run had plateaued, clearly negative where it was still learning."""
    change = loss_change_at_end(record.metrics)
    return None if change is None else change[0]


def acc_at_epoch(record: CellResult, epoch: str) -> float | None:
    found = [row.get("test_acc") for row in record.metrics if row.get("epoch") == int(epoch)]
    return found[-1] if found else None


def tracked_change(record: CellResult, key: str) -> float | None:
    """Needs the step-0 row: without it the first row is already trained."""
    start, end = record.metrics[0].get(key), record.metrics[-1].get(key)
    numbers = isinstance(start, int | float) and isinstance(end, int | float)
    return float(end) - float(start) if numbers and record.metrics[0].get("epoch") == 0 else None


def gate_spread(record: CellResult, _: str) -> float | None:
    gates = layer_means(record.metrics[-1], "gate")
    return gates[min(gates)] - gates[max(gates)] if gates else None


def mean_gate(record: CellResult, _: str) -> float | None:
    """How positional a GPSA model (or a converted ViT) stays: its gates' mean over layers and heads at
    the end (sigmoid(1) = 0.73 at the start; 0 is content attention alone)."""
    gates = layer_means(record.metrics[-1], "gate")
    return statistics.fmean(gates.values()) if gates else None


def nonlocality_growth(record: CellResult, _: str) -> float | None:
    first, last = (
        layer_means(record.metrics[0], "nonlocality"),
        layer_means(record.metrics[-1], "nonlocality"),
    )
    gpsa = sorted(set(layer_means(record.metrics[-1], "gate")))
    if not gpsa or not first or not last:
        return None
    return statistics.fmean(last[layer] - first[layer] for layer in gpsa)


METRICS: dict[str, Metric] = {  # a plain name, or a prefix ending in ':' that takes a parameter
    "final_acc": Metric(lambda record, _: record.final_accuracy, "the last epoch's test accuracy"),
    "final_train_acc": Metric(final_train_acc, "the last epoch's running training accuracy (as trained)"),
    "fit_acc": Metric(fit_acc, "the accuracy on the run's own training images, unaugmented, at the end"),
    "late_loss_change": Metric(
        late_loss_change, "the last epoch's training loss minus that of a tenth of the run earlier"
    ),
    "acc_at_epoch:": Metric(
        acc_at_epoch, "the test accuracy after epoch N", "N", lambda n: n.isascii() and n.isdigit()
    ),
    "tracked_end:": Metric(
        lambda record, key: number(record.metrics[-1].get(key)),
        "a tracker's figure at the end, e.g. tracked_end:init_quality/target_mass",
        "KEY",
    ),
    "tracked_change:": Metric(tracked_change, "a tracker's figure at the end minus at step 0", "KEY"),
    "gate_spread": Metric(gate_spread, "the first GPSA layer's mean gate minus the last one's, at the end"),
    "mean_gate": Metric(mean_gate, "the GPSA layers' mean gate at the end"),
    "nonlocality_growth": Metric(
        nonlocality_growth, "the GPSA layers' mean non-locality at the end minus at step 0"
    ),
}
METRIC_NAMES = tuple(prefix + entry.argument for prefix, entry in METRICS.items())  # acc_at_epoch:N, ...


def layer_means(row: dict[str, Any], name: str) -> dict[int, float]:
    """{layer: mean over heads} of a tracker's per-head keys `name/L{l}/H{h}` in one metrics row."""
    values: dict[int, list[float]] = {}
    for key, value in row.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == name and parts[1][1:].isdigit() and isinstance(value, int | float):
            values.setdefault(int(parts[1][1:]), []).append(float(value))
    return {layer: statistics.fmean(v) for layer, v in values.items()}


@dataclass
class Outcome:
    """What the runs say about one claim."""

    values: dict[int, float]
    reference: dict[int, float]
    difference: PairedDifference | None
    verdict: str
    share: GapShare | None = None  # of the gap between the reference and the claim's ceiling


def seed_values(records: list[CellResult], label: str | None, metric: str) -> dict[int, float]:
    found = {}
    for record in records:
        if record.label == label:
            value = metric_value(record, metric)
            if value is not None and math.isfinite(value):
                found[record.seed] = float(value)
    return found


def judge(claim: Claim, records: list[CellResult], shared: list[CellResult] | None = None) -> Outcome:
    """The claim's row (from `records`) against its reference and ceiling (from `shared`, the reference
    grid's runs, where the claim names one; else from `records`)."""
    shared = records if shared is None else shared
    values = seed_values(records, claim.row, claim.metric)
    reference = seed_values(shared, claim.reference, claim.metric) if claim.reference else {}
    if claim.reference is None:  # a figure judged against 0 (e.g. a gate spread)
        reference = {seed: 0.0 for seed in values}
    difference = paired_difference(values, reference)
    share = None
    if claim.ceiling is not None:
        share = gap_share(values, reference, seed_values(shared, claim.ceiling, claim.metric))
    return Outcome(values, reference, difference, verdict(claim, difference), share)


def verdict(claim: Claim, difference: PairedDifference | None) -> str:
    if claim.cpu:
        return f"not measurable on a CPU: {claim.cpu}"
    if difference is None:
        return "not yet run"
    if len(difference.seeds) < MIN_SEEDS:
        return f"no verdict yet ({len(difference.seeds)} of {MIN_SEEDS} seeds run)"
    low, high = difference.interval
    if claim.expect == "similar":
        return similar_verdict(low, high, claim.margin)
    if low <= 0 <= high:
        return "within noise"
    return "holds" if (low > 0) == (claim.expect == "higher") else "does not hold"


def similar_verdict(low: float, high: float, margin: float) -> str:
    """An equivalence test: the interval must lie inside +-margin, not merely contain 0."""
    if -margin <= low and high <= margin:
        return f"holds (within +-{margin:g})"
    if low > 0 or high < 0:
        return "does not hold"
    return f"within noise (interval wider than +-{margin:g})"


def mean_std(values: dict[int, float]) -> str:
    if not values:
        return "-"
    numbers = list(values.values())
    if len(numbers) == 1:
        return f"{numbers[0]:.2f} (1 seed)"
    return f"{statistics.fmean(numbers):.2f} +- {statistics.stdev(numbers):.2f} ({len(numbers)} seeds)"


def setting(claim: Claim, records: list[CellResult]) -> str:
    """'digits, 1,000 train / 797 test images, simplevit (dim 64, depth 4), 20 epochs': the row's
    config as the grid states it (so a row not yet run shows it too), image counts from a finished run."""
    configs = row_configs(claim.experiment or "", overrides_key(claim))
    if claim.row not in configs:
        return "-"
    config = configs[claim.row]
    found = [r for r in records if r.label == claim.row]
    data = read_json(found[0].run_dir / "preprocessing.json") if found else {}
    train, test = data.get("train_images"), data.get("test_images")
    held = config.get("holdout_per_class")  # evaluated on a validation split, the test set never read
    split = f"validation images ({held} per class held out of the training set)" if held else "test images"
    if isinstance(train, int) and isinstance(test, int):
        size = f"{train:,} train / {test:,} {split}"
    else:
        size = train_size(config) + (f", {held} per class held out for validation" if held else "")
    return f"{config.get('dataset')}, {size}, {model_words(config)}, {config.get('epochs')} epochs"


def overrides_key(claim: Claim) -> str:
    """A claim's overrides as JSON text: hashable (for `row_configs`' cache) with list or mapping values."""
    return json.dumps(claim.overrides or {}, sort_keys=True)


@cache
def row_configs(experiment: str, overrides: str = "{}") -> dict[str, dict[str, Any]]:
    """{row label: config} of an experiment's small scale, from its preset, with a claim's overrides."""
    specs = expand(experiment, "small", seeds=[0], extra_overrides=flatten(json.loads(overrides)))
    return {spec.label: spec.config.to_dict() for spec in specs}


def train_size(config: dict[str, Any]) -> str:
    if config.get("per_class"):
        return f"{config['per_class']} train images per class"
    if config.get("train_fraction"):
        return f"{config['train_fraction']:g} of the training set"
    return "the whole training set"


def model_words(config: dict[str, Any]) -> str:
    """The model and the arguments that size it: 'simplevit (dim 64, depth 4)'."""
    args = config.get("model_args") or {}
    sizes = [f"{key} {args[key]}" for key in SIZE_KEYS if key in args]
    return f"{config.get('model')} ({', '.join(sizes)})" if sizes else str(config.get("model"))


SIZE_KEYS = (
    "dim",
    "embed_dim",
    "depth",
    "heads",
    "num_heads",
    "mlp_ratio",
    "patch_size",
    "kernel_size",
    "filter_heads",
    "local_up_to_layer",
    "qk_input",
    "alpha",
)


def grid_words(claim: Claim) -> str:
    """'paper1-table2', or 'paper1-table2 with epochs=100' for a claim that changes the grid."""
    return f"{claim.experiment} with {claim.overrides_text()}" if claim.overrides else str(claim.experiment)


def claim_row(claim: Claim, outcome: Outcome, records: list[CellResult]) -> str:
    difference = "-" if outcome.difference is None else outcome.difference.describe()
    if outcome.share is not None:
        difference += f"; share of the gap to {claim.ceiling}: {outcome.share.describe()}"
    cells = [
        claim.claim,
        claim.paper,
        f"{grid_words(claim)}: {setting(claim, records)}" if claim.experiment else "-",
        f"{claim.row or '-'}: {mean_std(outcome.values)}",
        f"{claim.reference}: {mean_std(outcome.reference)}" if claim.reference else "0",
        difference,
        f"**{outcome.verdict}**",
    ]
    return "| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |"


HEADER = (
    "| claim | paper | grid: convinit's setting | convinit | reference | paired difference [95 % interval] "
    "| verdict |\n| --- | --- | --- | --- | --- | --- | --- |"
)


def render(results: Path) -> str:
    """The whole page, from `results/claims.yaml` and the runs under `results/`."""
    return render_page(results)[0]


def render_page(results: Path) -> tuple[str, dict[str, list[SizePoint]]]:
    """The page, and the points of each curve it shows (`convinit results` draws their figures)."""
    claims = load_claims(results)
    runs: dict[str, list[CellResult]] = {}
    skipped: list[tuple[Path, str]] = []
    commands: dict[str, str] = {}  # per runs folder, the grid command that fills it
    for claim in claims:
        if not claim.experiment:
            continue
        for name, command in zip(
            (claim.runs_folder, claim.reference_runs_folder), claim.commands(), strict=False
        ):
            commands.setdefault(name, command)
            if name not in runs:
                folder = results / name
                runs[name] = find_runs(folder, skipped) if folder.is_dir() else []
    sections: dict[str, list[tuple[Claim, Outcome]]] = {}  # each claim judged once, in the file's order
    for claim in claims:
        own, shared = runs.get(claim.runs_folder, []), runs.get(claim.reference_runs_folder, [])
        sections.setdefault(claim.section, []).append((claim, judge(claim, own, shared)))
    curves = size_curves(sections, runs)
    parts = [INTRO, *summary(sections)]
    for section, pairs in sections.items():
        chosen = [claim for claim, _ in pairs]
        parts += [
            f"## {section}",
            "",
            HEADER,
            *(claim_row(c, outcome, runs.get(c.runs_folder, [])) for c, outcome in pairs),
        ]
        notes = [c.note for c in chosen if c.note]
        parts += ["", "Notes:", "", *(f"- {note}" for note in dict.fromkeys(notes))] if notes else []
        for name in dict.fromkeys(c.curve for c in chosen if c.curve in curves):
            parts += ["", f"{name}:", "", *curve_table(curves[name]), "", f"![{name}]({figure_name(name)})"]
        made_by = [command for c in chosen if c.experiment for command in c.commands()]
        parts += ["", "Made by:", "", "```bash", *dict.fromkeys(made_by), "```", ""] if made_by else [""]
    parts += left_out(skipped, results)
    parts += grid_tables(runs, commands)
    return "\n".join(parts).rstrip() + "\n", curves


def size_curves(
    sections: dict[str, list[tuple[Claim, Outcome]]], runs: dict[str, list[CellResult]]
) -> dict[str, list[SizePoint]]:
    """Per curve name, a point for each of its claims whose row has run (its training images read from the
    run's preprocessing.json), in the claims file's order."""
    curves: dict[str, list[SizePoint]] = {}
    for pairs in sections.values():
        for claim, outcome in pairs:
            images = train_images(runs.get(claim.runs_folder, []), claim.row)
            if claim.curve and images is not None and claim.row and claim.reference:
                point = SizePoint(
                    images, claim.row, claim.reference, outcome.values, outcome.reference, outcome.difference
                )
                curves.setdefault(claim.curve, []).append(point)
    return curves


def train_images(records: list[CellResult], label: str | None) -> int | None:
    """The number of training images a row's first run trained on (its preprocessing.json), if recorded."""
    found = [r for r in records if r.label == label]
    count = read_json(found[0].run_dir / "preprocessing.json").get("train_images") if found else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def left_out(skipped: list[tuple[Path, str]], results: Path) -> list[str]:
    """Every run folder that gives no figure, named with the reason (so "2 of 3 seeds run" is explained)."""
    if not skipped:
        return []
    lines = [f"- `{run_dir.relative_to(results.parent)}`: {reason}" for run_dir, reason in skipped]
    return [
        "## Run folders left out",
        "",
        "These folders hold a run's files but give no figure:",
        "",
        *lines,
        "",
    ]


VERDICT_KINDS = ("holds", "does not hold", "within noise", "not measurable", "no verdict", "not yet run")


def summary(sections: dict[str, list[tuple[Claim, Outcome]]]) -> list[str]:
    """One line per section: how many claims fall under each verdict, so the page opens on the answer."""
    lines = [
        "## Summary",
        "",
        "| section | claims | " + " | ".join(VERDICT_KINDS) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in VERDICT_KINDS) + " |",
    ]
    totals = dict.fromkeys(VERDICT_KINDS, 0)
    for section, pairs in sections.items():
        counts = dict.fromkeys(VERDICT_KINDS, 0)
        for _, outcome in pairs:
            counts[next(kind for kind in VERDICT_KINDS if outcome.verdict.startswith(kind))] += 1
        totals = {kind: totals[kind] + counts[kind] for kind in VERDICT_KINDS}
        lines.append(count_line(section, len(pairs), counts))
    lines.append(count_line("all", sum(len(pairs) for pairs in sections.values()), totals))
    return [*lines, ""]


def count_line(name: str, claims: int, counts: dict[str, int]) -> str:
    return f"| {name} | {claims} | " + " | ".join(str(counts[kind]) for kind in VERDICT_KINDS) + " |"


GRID_NOTE = (
    "Final train accuracy is the last epoch's running accuracy over the training batches as trained "
    "(augmented where the run augments). Fit is the trained model on its own training images, unaugmented "
    "(runs that recorded it), and the change of the training loss over the run's last tenth of epochs: a "
    "fit well below 100 did not fit its training set, and a clearly negative change was still learning. "
    "The start figures are the init report's, on held-apart real training images at the run's own settings: "
    "the mean attention mass on each head's target; each head's worst query row's mass, averaged over heads "
    "(in brackets: the lowest of any head); and the share of rows whose peak is the target. The end figure "
    "is the tracker's target mass after the last epoch; the mean gate, over the GPSA layers and heads "
    "(sigmoid(1) = 0.73 at the start, 0: content attention alone), and the first layer's non-locality "
    "(the attention-weighted mean distance, in patches, between a query and its keys) are the trackers' "
    "figures after the last epoch too, where the grid tracked them."
)


def grid_tables(runs: dict[str, list[CellResult]], commands: dict[str, str]) -> list[str]:
    """Every row of every grid (per results folder) with its seeds, and how convolutional its init started."""
    parts = ["## Every row of every grid", "", GRID_NOTE, ""]
    for folder, records in runs.items():
        if not records:
            continue
        held_out = any(r.config.get("holdout_per_class") for r in records)  # evaluated on validation
        header = GRID_HEADER.replace("final test", "final validation") if held_out else GRID_HEADER
        parts += [f"### {folder}", "", header]
        for label in dict.fromkeys(r.label for r in records):
            values = seed_values(records, label, "final_acc")
            per_seed = ", ".join(f"{values[s]:.2f}" for s in sorted(values))
            end_mass, gate, nonlocality = (
                mean_over_seeds(records, label, metric)
                for metric in (f"tracked_end:{END_MASS}", "mean_gate", "tracked_end:nonlocality/L0")
            )
            train = seed_values(records, label, "final_train_acc")
            trained = f"{statistics.fmean(train.values()):.1f}" if train else "-"
            fit = mean_over_seeds(records, label, "fit_acc", 1)
            fitted = (
                "-" if fit == "-" else f"{fit} / {mean_over_seeds(records, label, 'late_loss_change', 3)}"
            )
            parts.append(
                f"| {label} | {mean_std(values)} | {per_seed} | {trained} | {fitted} "
                f"| {init_figures(records, label)} | {end_mass} | {gate} | {nonlocality} |"
            )
        parts += ["", "```bash", commands[folder], "```", ""]
    return parts


def mean_over_seeds(records: list[CellResult], label: str, metric: str, digits: int = 2) -> str:
    """'0.84': a claim metric's mean over a row's seeds, to two decimals; '-' where no run gives it."""
    values = seed_values(records, label, metric)
    return f"{statistics.fmean(values.values()):.{digits}f}" if values else "-"


def init_figures(records: list[CellResult], label: str) -> str:
    """Mean over seeds of the init report's held-apart real-pass figures, where the init has targets."""
    found = []
    for record in (r for r in records if r.label == label):
        held = read_json(record.run_dir / "init_report.json").get("real_pass_held_out")
        if isinstance(held, dict) and isinstance(held.get("mean_mass"), int | float):
            found.append(held)
    if not found:
        return "-"
    mass = statistics.fmean(h["mean_mass"] for h in found)
    worst, typical, share = (
        [h[key] for h in found if isinstance(h.get(key), int | float)]
        for key in ("min_worst_row_mass", "mean_worst_row_mass", "mean_rows_on_target")
    )
    if not (worst and typical and share):
        return f"{mass:.2f} / - / -"
    return f"{mass:.2f} / {statistics.fmean(typical):.2f} ({min(worst):.2f}) / {statistics.fmean(share):.2f}"


INTRO = f"""# Results: both papers, claim by claim, at CPU scale

This page is generated by `convinit results` from the runs kept under `results/` (config, provenance,
metrics and init report of every run; no checkpoints) and the claims listed in `results/claims.yaml`.
Do not edit it by hand: rerun a grid with the command in its row, then `convinit results`.

Every row ran on a CPU at the small scale of its experiment (digits: 1,000 training and 797 test images;
Fashion-MNIST: 1,000 training images, 100 per class, and all 10,000 test images, unless a row says
otherwise), one thread per run, three seeds (five in the grids users-vit-end and vit-vs-cnn; each row says
how many). "convinit" is the final-epoch test accuracy (never the best epoch; on a validation split held
out of the training images where a row says so), mean +- std over seeds; the paired difference is the row
minus its reference on the same seeds, with its 95 % t interval. Where a claim names a ceiling (a CNN), the
share of the gap is the row's mean gain over its reference divided by the ceiling's, with the paired
interval in the same units (0: no gain, 1: up to the ceiling). The GPU-scale
settings of every experiment stay as its `--scale full` preset; the papers' numbers come from those.

Verdicts come from the paired interval: **holds** when it excludes 0 on the paper's side, **does not
hold** when it excludes 0 on the other side, **within noise** when it contains 0. A claim that two rows
are about as good is an equivalence claim: it holds only when the whole interval lies within
+-{EQUIVALENCE_MARGIN:g} points (or the margin the claim gives); a wide interval that contains 0 is
within noise, not a confirmation.
"""
