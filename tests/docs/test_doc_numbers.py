"""Every figure the README and docs/ state about a run is what the kept runs give: a drift fails.

The kept runs: results/<grid>/ (the results page's grids, read with the code that writes that page and
`convinit report`) and docs/demo/ (the results.csv that `convinit demo` and `convinit demo --quick`
wrote, as full.csv and quick.csv). STATED builds, page by page, the text each page must hold from those
files (line breaks aside). A figure given as `mean +- std` that no entry of its page produces fails
too, except under a heading that says its runs are not kept (earlier measurements, labelled as such).
docs/results.md is generated whole (tests/experiments/test_results_page.py).

After a rerun: copy the demo's results.csv over docs/demo/full.csv (--quick: quick.csv), then
`python tests/docs/test_doc_numbers.py` prints every stated text to paste into its page, and the
figures `convinit.recommend` gives (convinit.train.recommendation.EVIDENCE: the package does not ship
the kept runs, so it holds them as text that this test keeps equal to them).
"""

from __future__ import annotations

import csv
import functools
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from convinit.experiments.paired import PairedDifference, gap_share, paired_difference
from convinit.experiments.report import CellResult, find_runs
from convinit.experiments.results_page import init_figures, mean_over_seeds, seed_values

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
DEMO = ROOT / "docs" / "demo"
NOT_KEPT = "runs not kept"  # in a heading: the section's figures come from earlier runs, not kept
FIGURE = re.compile(r"[+-]?\d+\.\d+ \+- \d+\.\d+")
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "results.md")]


@functools.cache
def runs(grid: str) -> tuple[CellResult, ...]:
    return tuple(find_runs(RESULTS / grid))


def accs(grid: str, label: str) -> dict[int, float]:
    values = seed_values(list(runs(grid)), label, "final_acc")
    assert values, f"no kept run of the grid {grid!r} has the row {label!r}"
    return values


def acc(grid: str, label: str) -> str:
    """'97.28 +- 0.07': final-epoch test accuracy, mean +- std over the kept seeds."""
    values = list(accs(grid, label).values())
    return f"{statistics.fmean(values):.2f} +- {statistics.stdev(values):.2f}"


def paired(grid: str, row: str, reference: str, other_grid: str | None = None) -> PairedDifference:
    difference = paired_difference(accs(grid, row), accs(other_grid or grid, reference))
    assert difference is not None, f"{row!r} and {reference!r} share no seed"
    return difference


def gain(grid: str, row: str, reference: str) -> str:
    """'+9.2': the mean paired difference in points, to one decimal."""
    return f"{paired(grid, row, reference).mean:+.1f}"


def held_mass(grid: str, label: str) -> str:
    """The init report's mean attention mass on the target, on held-apart images, mean over seeds."""
    return init_figures(list(runs(grid)), label).split(" / ")[0]


def tracked(grid: str, label: str, key: str) -> str:
    """'0.80 / 0.33': a tracked figure at step 0 and at the end, means over seeds."""
    group = [r for r in runs(grid) if r.label == label]
    start, end = ([r.bias(f"init_quality/{key}")[i] for r in group] for i in (0, 1))
    assert group and None not in start + end, f"{grid!r} {label!r} did not track {key}"
    return f"{statistics.fmean(start):.2f} / {statistics.fmean(end):.2f}"


def demo(name: str) -> list[dict[str, str]]:
    with open(DEMO / f"{name}.csv", newline="") as f:
        return list(csv.DictReader(f))


def demo_table() -> str:
    """The demo's accuracies, the --quick demo's beside the full one's (times vary with the machine's load:
    they stay in each demo's report)."""
    full, quick = demo("full"), {row["method"]: row for row in demo("quick")}
    assert [row["method"] for row in full] == list(quick), "the full and quick demos trained other methods"
    epochs = (full[0]["epochs"], next(iter(quick.values()))["epochs"])
    lines = [
        f"| method | parameters | final test acc (%), {epochs[0]} epochs | `--quick`, {epochs[1]} epochs |",
        "| --- | ---: | ---: | ---: |",
    ]
    for row in full:
        size, quick_size = int(row["parameters"]), int(quick[row["method"]]["parameters"])
        sizes = f"{size:,}" if size == quick_size else f"{size:,} ({quick_size:,} in `--quick`)"
        lines.append(
            f"| {row['method']} | {sizes} | {float(row['final_test_acc_mean']):.1f} "
            f"| {float(quick[row['method']]['final_test_acc_mean']):.1f} |"
        )
    return "\n".join(lines)


def demo_acc(name: str, method: str) -> str:
    return next(f"{float(r['final_test_acc_mean']):.1f}" for r in demo(name) if r["method"] == method)


T3, BIAS, EFF, CONVIT, USERS, END = (
    "paper1-table3",
    "beyond-bias-remedies",
    "paper1-data-efficiency",
    "convit-sample-efficiency",
    "users-vit",
    "users-vit-end",
)
END30 = "users-vit-end-30"  # users-vit-end's deciding rows at 30 images per class
CNN, GPSA, PROJECTED = "ConvMixer (CNN)", "GPSA conversion", "blend conversion + impulse + content projection"
CF = ", crop+flip"  # the light-augmentation twin of a users-vit-end row
END_ROWS = (
    "random",
    "scaled-position",
    "impulse",
    "mimetic (Trockman & Kolter)",
    GPSA,
    "blend conversion + impulse",
    "blend conversion + impulse, table kept",
    PROJECTED,
    "convinit ConViT (same width, depth)",
    CNN,
)
FIT, RECIPE = "impulse (convinit closed form)", "impulse (paper 1 recipe)"


def paper1_digits_row(alpha: str) -> str:
    """README: random, convinit's fit, paper 1's recipe at one alpha (grid paper1-table3)."""
    return (
        f"| digits | {alpha} | {acc(T3, f'random, alpha {alpha}')} | {acc(T3, f'{FIT}, alpha {alpha}')} "
        f"| {acc(T3, f'{RECIPE}, alpha {alpha}')} |"
    )


def paper1_page_rows(alpha: str) -> str:
    """docs/paper1.md: the digits rows with the bias tracked (beyond-bias-remedies are the same runs as
    paper1-table3's, with track=[init_quality]; paper 1's recipe was not tracked)."""
    random, fit = f"random, alpha {alpha}", f"impulse, alpha {alpha}"
    mass = tracked(BIAS, fit, "target_mass")  # random has no target offset
    best = [tracked(BIAS, label, "best_offset_mass") for label in (random, fit)]
    entropy = [tracked(BIAS, label, "entropy") for label in (random, fit)]
    recipe = paired(T3, f"{RECIPE}, alpha {alpha}", f"random, alpha {alpha}").describe()
    return "\n".join(
        [
            f"| digits | {alpha} | random | 3 | {acc(BIAS, random)} | reference | - | {best[0]} "
            f"| {entropy[0]} |",
            f"| digits | {alpha} | {FIT} | 3 | {acc(BIAS, fit)} | {paired(BIAS, fit, random).describe()} "
            f"| {mass} | {best[1]} | {entropy[1]} |",
            f"| digits | {alpha} | {RECIPE} | 3 | {acc(T3, f'{RECIPE}, alpha {alpha}')} | {recipe} "
            "| - | - | - |",
        ]
    )


def share(row: str, setting: str = "") -> str:
    """'0.39 [0.15, 0.63]': the share of the random-to-CNN gap a users-vit-end row closes (the results
    page's figure), in the plain setting or with `setting` (', crop+flip')."""
    row_, random, cnn = (accs(END, label + setting) for label in (row, "random", CNN))
    found = gap_share(row_, random, cnn)
    assert found is not None, f"{row!r}, random and the CNN share no seed"
    return found.describe()


def end_mass(label: str) -> str:
    """'0.84': a users-vit-end row's target mass at the end, mean over seeds (the grid table's figure)."""
    mass = mean_over_seeds(list(runs(END)), label, "tracked_end:init_quality/target_mass")
    assert mass != "-", f"{label!r} did not track the target mass"
    return mass


def crop_flip_fit() -> str:
    """'final training accuracy 50-82 % against the CNN's 97 %': how far the crop+flip rows fit."""
    fits = {
        label: statistics.fmean(seed_values(list(runs(END)), label + CF, "final_train_acc").values())
        for label in END_ROWS
    }
    vits = [fit for label, fit in fits.items() if label != CNN]
    return f"final training accuracy {min(vits):.0f}-{max(vits):.0f} % against the CNN's {fits[CNN]:.0f} %"


def end_row(label: str) -> str:
    """docs/own-models.md: one row of the users-vit-end table, both settings and the gap share."""
    per_seed = ", ".join(f"{v:.2f}" for _, v in sorted(accs(END, label).items()))
    gap = "-" if label in ("random", CNN) else share(label)
    return f"| {label} | {acc(END, label)} | {per_seed} | {acc(END, f'{label}, crop+flip')} | {gap} |"


def fractions(grid: str, row: str) -> str:
    """'87.83 +- 1.74, 95.52 +- 1.38 and 97.28 +- 0.07' over a grid's training fractions."""
    figures = [acc(grid, f"{row} {p}%") for p in (20, 50, 100)]
    return f"{figures[0]}, {figures[1]} and {figures[2]}"


def convit_gains() -> str:
    """'+25.60 to +34.34': ConViT minus its DeiT twin over every fraction of its grid."""
    means = [paired(CONVIT, f"ConViT {p}%", f"DeiT {p}%").mean for p in (10, 25, 50, 100)]
    return f"{min(means):+.2f} to {max(means):+.2f}"


VS, VS300 = "vit-vs-cnn", "vit-vs-cnn-300"  # the users' ViT against the CNN, crop+flip, to convergence
VS100 = "vit-vs-cnn-100"  # the same at 100 images, 1,500 epochs (300 left the ViT short of fitting them)


def vs_cnn_table(grid: str) -> str:
    """docs/own-models.md: every kept row of a vit-vs-cnn grid (kept order), its final test accuracy, how far
    it fitted its unaugmented training images, and its paired difference from the CNN of the same seeds."""
    records = list(runs(grid))
    lines = [
        "| row | seeds | final test accuracy (%) | fit: unaugmented train accuracy (%) | against the CNN |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for label in dict.fromkeys(r.label for r in records):
        values = accs(grid, label)
        spread = acc(grid, label) if len(values) > 1 else f"{next(iter(values.values())):.2f}"
        against = "-" if label == CNN else paired(grid, label, CNN).describe()
        lines.append(f"| {label} | {len(values)} | {spread} | {fit(grid, label)} | {against} |")
    return "\n".join(lines)


P600, BOTH = f"{PROJECTED}, 600 epochs", "GPSA + blend conversion + impulse + content projection"
DISTILLED, DEIT, CNN_DEIT = (
    f"{PROJECTED}, distilled from the CNN",
    f"{PROJECTED}, DeiT recipe",
    f"{CNN}, DeiT recipe",
)
DEIT600, DEIT1200 = f"{DEIT}, 600 epochs", f"{DEIT}, 1200 epochs"
CNN_DEIT1200 = f"{CNN_DEIT}, 1200 epochs"  # the control for DEIT1200's longer schedule
VALID, EPOCHS = "users-vit-end-validation", "vit-vs-cnn-epochs"  # choices made on a validation split


def fit(grid: str, label: str) -> str:
    """'92.2': a row's accuracy on its own training images, unaugmented, after the last epoch (mean)."""
    value = mean_over_seeds(list(runs(grid)), label, "fit_acc", 1)
    assert value != "-", f"{grid!r} {label!r} recorded no fit"
    return value


def vs_cnn_verdict(grid: str, images: str) -> str:
    """The best ViT against the CNN of the same seeds, as the own-models page states it."""
    return (
        f"at {images} images the best convinit ViT reached {acc(grid, PROJECTED)} % against the CNN's "
        f"{acc(grid, CNN)} %, a paired difference of {paired(grid, PROJECTED, CNN).describe()}"
    )


def crossover() -> str:
    """docs/own-models.md: the best ViT minus the CNN at each training-set size kept, and where the ViT
    wins, said only as far as the paired intervals go."""
    sizes = [(images, grid) for images, grid in (("100", VS100), ("300", VS300), ("1,000", VS)) if runs(grid)]
    differences = [(images, paired(grid, PROJECTED, CNN)) for images, grid in sizes]
    ahead = [images for images, d in differences if d.interval is not None and d.interval[0] > 0]
    behind = [images for images, d in differences if d.interval is not None and d.interval[1] < 0]
    if len(behind) == len(differences):
        verdict = (
            "the CNN leads at every size measured, so no size from 100 to 1,000 images is one below which "
            "the ViT with convinit's bias beats the CNN of its size"
        )
    else:
        verdict = (
            f"the ViT leads at {', '.join(ahead) or 'no size'}, the CNN at {', '.join(behind) or 'no size'}, "
            "and the rest are within noise"
        )
    figures = ", ".join(f"{d.describe()} at {images} images" for images, d in differences)
    return f"the best ViT minus the CNN: {figures}; {verdict}"


def epoch_choice() -> str:
    """The CNN's validation accuracy at each epoch count of vit-vs-cnn-epochs, kept rows only."""
    labels = dict.fromkeys(r.label for r in runs(EPOCHS))
    return ", ".join(
        f"{acc(EPOCHS, label)} % at {label}" for label in sorted(labels, key=lambda s: int(s.split()[0]))
    )


def kept(grid: str, label: str) -> bool:
    return bool(seed_values(list(runs(grid)), label, "final_acc"))


def vs_cnn_findings() -> str:
    """docs/own-models.md's bullets under the vit-vs-cnn tables: the verdict, whether the ViT had
    converged, each route against its control and the CNN, the CNN's epoch count and the recipe choice
    on validation (the routes and choices whose runs are kept)."""
    bullets = [
        f"**The CNN stays ahead:** {vs_cnn_verdict(VS, '1,000')}; "
        f"{vs_cnn_verdict(VS300, '300')}. The ViT had converged: at 600 epochs it fits {fit(VS, P600)} % "
        f"of its training images (at 300, {fit(VS, PROJECTED)} %) and ends at {acc(VS, P600)} %, "
        f"{paired(VS, P600, PROJECTED).describe()} over 300 epochs, while the CNN fits {fit(VS, CNN)} % of "
        "its own at 300."
    ]
    if kept(VS300, P600):
        bullets.append(
            f"**At 300 images, 600 epochs** the best ViT fits {fit(VS300, P600)} % of its training images "
            f"(at 300 epochs, {fit(VS300, PROJECTED)} %) and ends at {acc(VS300, P600)} %, "
            f"{paired(VS300, P600, PROJECTED).describe()} over 300 epochs and "
            f"{paired(VS300, P600, CNN).describe()} against the CNN"
        )
    for grid, images in ((VS, "1,000"), (VS300, "300")):
        if kept(grid, BOTH):
            bullets.append(
                f"**Both conversions in one model** ({images} images: GPSA in the first 3 blocks, the "
                f"projected blend in the last) reached {acc(grid, BOTH)} %: "
                f"{paired(grid, BOTH, PROJECTED).describe()} against the projected blend alone, "
                f"{paired(grid, BOTH, GPSA).describe()} against the GPSA conversion alone"
            )
        if kept(grid, DISTILLED):
            bullets.append(
                f"**Distilled from the CNN** ({images} images; DeiT's hard distillation, the CNN of the same "
                f"seed as teacher) the best ViT reached {acc(grid, DISTILLED)} %: "
                f"{paired(grid, DISTILLED, CNN).describe()} against the CNN that taught it, "
                f"{paired(grid, DISTILLED, PROJECTED).describe()} against the same ViT without a teacher"
            )
        if kept(grid, DEIT):
            text = (
                f"**DeiT's small-data recipe** ({images} images; random erasing, mixup and cutmix, repeated "
                f"augmentation, stochastic depth on the ViT, the same 300 epochs) gives the best ViT "
                f"{acc(grid, DEIT)} %, {paired(grid, DEIT, PROJECTED).describe()} against it without the "
                f"recipe; it fits {fit(grid, DEIT)} % of its training images (without the recipe "
                f"{fit(grid, PROJECTED)} %)"
            )
            if kept(grid, CNN_DEIT):
                text += (
                    f". The CNN with the recipe reaches {acc(grid, CNN_DEIT)} % "
                    f"({paired(grid, CNN_DEIT, CNN).describe()}); with the recipe on both, the ViT against "
                    f"the CNN: {paired(grid, DEIT, CNN_DEIT).describe()}"
                )
            bullets.append(text)
        if kept(grid, DEIT600):
            bullets.append(
                f"**DeiT's recipe at 600 epochs** ({images} images, the recipe's ViT at twice the "
                f"schedule) reaches {acc(grid, DEIT600)} % and fits {fit(grid, DEIT600)} % of its "
                "training images: "
                f"{paired(grid, DEIT600, P600).describe()} against the best ViT at 600 epochs without the "
                f"recipe, {paired(grid, DEIT600, CNN_DEIT).describe()} against the CNN with the recipe"
            )
        if kept(grid, DEIT1200):
            bullets.append(
                f"**DeiT's recipe at 1,200 epochs** ({images} images) reaches {acc(grid, DEIT1200)} % and "
                f"fits {fit(grid, DEIT1200)} % of its training images: "
                f"{paired(grid, DEIT1200, DEIT600).describe()} against 600 epochs, "
                f"{paired(grid, DEIT1200, CNN_DEIT).describe()} against the CNN with the recipe"
                + (
                    f"; the CNN with the recipe at the same 1,200 epochs reaches {acc(grid, CNN_DEIT1200)} % "
                    f"and fits {fit(grid, CNN_DEIT1200)} % "
                    f"({paired(grid, CNN_DEIT1200, CNN_DEIT).describe()} against 300 epochs), and the ViT "
                    "against it: "
                    f"{paired(grid, DEIT1200, CNN_DEIT1200).describe()}"
                    if kept(grid, CNN_DEIT1200)
                    else ""
                )
            )
    if runs(EPOCHS):
        bullets.append(
            "**The CNN's own epoch count**, chosen on a validation split of the training images (100 per "
            f"class held out, 3 seeds): {epoch_choice()}"
        )
    blend = "blend conversion + impulse"
    bullets.append(
        "**The recipe, chosen again on a validation split** (users-vit-end's rows, 100 epochs without "
        "augmentation, 100 images per class held out of the training images, 3 seeds): the projected "
        f"blend reached {acc(VALID, PROJECTED)} %, against {acc(VALID, blend)} % for the blend without "
        f"the projector ({paired(VALID, PROJECTED, blend).describe()}), {acc(VALID, GPSA)} % for the GPSA "
        f"conversion ({paired(VALID, PROJECTED, GPSA).describe()}) and {acc(VALID, 'impulse')} % for impulse "
        f"init alone ({paired(VALID, PROJECTED, 'impulse').describe()})"
    )
    if kept(VS100, PROJECTED):
        bullets.append(
            f"**At 100 images** (10 per class, 1,500 epochs: at 300 the ViT fitted only part of its 100 "
            f"images) the best ViT fits {fit(VS100, PROJECTED)} % of its training images and the CNN "
            f"{fit(VS100, CNN)} %; {vs_cnn_verdict(VS100, '100')}. **By training-set size**, {crossover()}"
        )
    if kept(HVC, F4):
        bullets.append(
            "**The filter count as the mechanism, on the test set** (heads-vs-cnn: 1,000 images, crop+flip, "
            "300 epochs; the CNN with 4 filters is paper 1's Table 6 construction, trained, 4 depthwise "
            f"filters shared out over its 128 channels): {filters_findings()}"
        )
    if runs(HEADS):
        bullets.append(f"**The number of heads, chosen on a validation split**: {heads_evidence()}")
    return "\n".join(f"- {bullet.removesuffix('.')}." for bullet in bullets)


STATED: dict[str, list[Callable[[], str]]] = {
    "README.md": [
        demo_table,
        lambda: f"{vs_cnn_verdict(VS, '1,000')}, and {vs_cnn_verdict(VS300, '300')}",
        lambda: (
            f"{demo_acc('full', 'ConViT (GPSA, local init)')} against "
            f"{demo_acc('full', 'DeiT twin of the ConViT')}"
        ),
    ],
    # the README in full (its detail moved there; the README links to it)
    "docs/getting-started.md": [
        lambda: f"{fractions(EFF, 'impulse')} % with impulse init against {fractions(EFF, 'random')} %",
        lambda: (
            f"ConViT, {convit_gains()} points ahead of its DeiT twin at every size, ends lower: "
            f"{acc('convit-ablation', 'full')} % on 1,000 digits"
        ),
        lambda: paper1_digits_row("0.1"),
        lambda: paper1_digits_row("0.5"),
        lambda: (
            f"{held_mass(T3, f'{FIT}, alpha 0.1')} of its attention on its offset at alpha 0.1 "
            f"({held_mass(T3, f'{FIT}, alpha 0.5')} at 0.5)"
        ),
        lambda: (
            f"{gain(T3, f'{FIT}, alpha 0.1', 'random, alpha 0.1')} points at alpha 0.1, "
            f"{gain(T3, f'{FIT}, alpha 0.5', 'random, alpha 0.5')} at 0.5"
        ),
        lambda: (
            f"{acc(END, 'impulse')} % with impulse init against {acc(END, 'random')} % at random, "
            f"a paired difference of {paired(END, 'impulse', 'random').describe()}"
        ),
        lambda: (
            f"{acc(END, PROJECTED)} %, {paired(END, PROJECTED, 'impulse').describe()} over impulse init "
            f"alone on the same seeds, closing {share(PROJECTED)} of the gap between random and a ConvMixer "
            f"CNN of the same size ({acc(END, CNN)} %)"
        ),
        lambda: (
            f"{paired(END, GPSA, 'random').describe()} over random without augmentation and "
            f"{paired(END, GPSA + CF, 'random' + CF).describe()} with it"
        ),
        lambda: f"{acc(END30, PROJECTED)} % against the CNN's {acc(END30, CNN)} %",
        lambda: f"{vs_cnn_verdict(VS, '1,000')}, and {vs_cnn_verdict(VS300, '300')}",
        lambda: (
            f"level with the CNN with it at 300 ({paired(VS, DEIT1200, CNN_DEIT).describe()}), and the "
            "CNN with it at the same 1,200 epochs is ahead again "
            f"({paired(VS, DEIT1200, CNN_DEIT1200).describe()})"
        ),
        lambda: (
            f"{demo_acc('full', 'ConViT (GPSA, local init)')} against "
            f"{demo_acc('full', 'DeiT twin of the ConViT')}"
        ),
    ],
    "docs/paper1.md": [
        lambda: paper1_page_rows("0.1"),
        lambda: paper1_page_rows("0.5"),
        lambda: (
            f"{paired(BIAS, 'impulse, alpha 0.1', 'random, alpha 0.1').describe()} at alpha 0.1 and "
            f"{paired(BIAS, 'impulse, alpha 0.5', 'random, alpha 0.5').describe()} at alpha 0.5"
        ),
        lambda: (
            f"{tracked(BIAS, 'impulse, alpha 0.1', 'target_mass')} at alpha 0.1 and "
            f"{tracked(BIAS, 'impulse, alpha 0.5', 'target_mass')} at alpha 0.5"
        ),
    ],
    "docs/own-models.md": [
        lambda label=label: (
            f"| {label} | {acc(USERS, label)} | "
            + ", ".join(f"{v:.2f}" for _, v in sorted(accs(USERS, label).items()))
            + " |"
        )
        for label in ("random", "scaled-position", "impulse", "mimetic (Trockman & Kolter)")
    ]
    + [lambda label=label: end_row(label) for label in END_ROWS]
    + [
        lambda: (
            f"{acc(END, PROJECTED)} % against {acc(END, 'impulse')} % with impulse init alone, a paired "
            f"difference of {paired(END, PROJECTED, 'impulse').describe()}; with crop+flip "
            f"{acc(END, PROJECTED + CF)} % against {acc(END, 'impulse' + CF)} %, "
            f"{paired(END, PROJECTED + CF, 'impulse' + CF).describe()}"
        ),
        lambda: (
            f"its target mass ends at {end_mass(PROJECTED)}, against {end_mass('impulse')} with impulse "
            f"init alone and {end_mass('blend conversion + impulse')} with the blend but no projector"
        ),
        lambda: (
            f"the CNN stays ahead of it by {paired(END, CNN, PROJECTED).describe()} without augmentation and "
            f"{paired(END, CNN + CF, PROJECTED + CF).describe()} with it"
        ),
        lambda: (
            f"{paired(END, GPSA, 'random').describe()} over random without augmentation, "
            f"{paired(END, GPSA + CF, 'random' + CF).describe()} with crop+flip"
        ),
        lambda: (
            f"{paired(END, 'impulse', 'random').describe()} over random without augmentation and "
            f"{paired(END, 'impulse' + CF, 'random' + CF).describe()} with it; its target mass falls from "
            f"{held_mass(END, 'impulse')} at init (on held-apart images) to {end_mass('impulse')} at the end"
        ),
        lambda: f"crop+flip adds {paired(END, CNN + CF, CNN).describe()} to the CNN",
        lambda: (
            f"the blend with content projection reached {acc(END30, PROJECTED)} % against the CNN's "
            f"{acc(END30, CNN)} %, a paired difference of {paired(END30, PROJECTED, CNN).describe()}; it led "
            f"impulse init alone by {paired(END30, PROJECTED, 'impulse').describe()}, impulse led random by "
            f"{paired(END30, 'impulse', 'random').describe()} and the GPSA conversion led random by "
            f"{paired(END30, GPSA, 'random').describe()}"
        ),
        crop_flip_fit,
        lambda: vs_cnn_table(VS),
        lambda: vs_cnn_table(VS300),
        vs_cnn_findings,
        lambda: f"impulse leads random by {paired(USERS, 'impulse', 'random').describe()}",
        lambda: f"{paired(USERS, 'impulse', 'scaled-position').describe()} on top",
    ],
}


def recommended_evidence() -> str:
    """The figures `convinit.recommend` gives for the recipe (convinit.train.recommendation.EVIDENCE)."""
    return (
        f"{acc(END, PROJECTED)} % against {acc(END, 'impulse')} % with impulse init alone "
        f"({paired(END, PROJECTED, 'impulse').describe()}) and {acc(END, 'random')} % at random on timm's "
        f"ViT, 1,000 Fashion-MNIST images, 100 epochs, 5 seeds; at 30 images per class "
        f"{acc(END30, PROJECTED)} % against a CNN's {acc(END30, CNN)} %; with crop+flip to convergence "
        f"(300 epochs) the CNN of the same budget stays ahead: {acc(VS, PROJECTED)} % against "
        f"{acc(VS, CNN)} % at 1,000 images ({paired(VS, PROJECTED, CNN).describe()}), "
        f"{acc(VS300, PROJECTED)} % against {acc(VS300, CNN)} % at 300 "
        f"({paired(VS300, PROJECTED, CNN).describe()})"
    )


HEADS = "heads-validation"  # the ViT's head count, chosen on a validation split


def heads_evidence() -> str:
    """The figures `convinit.recommend` gives on the number of heads (recommendation.HEADS_EVIDENCE), and
    the bullet of docs/own-models.md that states them: the verdict follows the paired intervals."""
    more = [paired(HEADS, f"recipe, {h} heads", "recipe, 4 heads") for h in (8, 16)]
    verdict = (
        "more, smaller heads helped"
        if any(d.interval is not None and d.interval[0] > 0 for d in more)
        else "more, smaller heads did not help beyond noise"
    )
    return (
        f"on held-out images {verdict}: with the recipe {acc(HEADS, 'recipe, 4 heads')} % at 4 heads of dim "
        f"16, {acc(HEADS, 'recipe, 8 heads')} % at 8 ({more[0].describe()}) and "
        f"{acc(HEADS, 'recipe, 16 heads')} % at 16 ({more[1].describe()}); at random init "
        f"{acc(HEADS, 'random, 4 heads')} %, {acc(HEADS, 'random, 8 heads')} % and "
        f"{acc(HEADS, 'random, 16 heads')} % (timm's ViT of width 64, depth 4, 1,000 Fashion-MNIST images, "
        "crop+flip, 300 epochs, 100 held-out images per class, 3 seeds)"
    )


HVC = "heads-vs-cnn"  # heads as filters, the CNN with as few, same-budget shapes (4 heads, CNN: VS's)
F4, H16 = "ConvMixer, 4 filters", "recipe, 16 heads"
W56, W48 = "recipe, width 56, depth 6, 14 heads", "recipe, width 48, depth 8, 12 heads"


def filters_findings() -> str:
    """docs/own-models.md's bullet on the ViT's filter count as the mechanism: the CNN with as few filters as
    the ViT has heads, and the ViTs with more heads or the CNN's depth, where their runs are kept; the
    words follow the paired intervals."""
    cnn_drop, over_vit = paired(HVC, F4, CNN, VS), paired(HVC, F4, PROJECTED, VS)
    low, high = over_vit.interval or (0.0, 0.0)
    mechanism = (
        "it still leads the 4-head ViT, so the number of spatial filters is not what keeps the ViT behind"
        if low > 0
        else "it falls below the 4-head ViT, so the filter count is what keeps the ViT behind"
        if high < 0
        else "it is within noise of the 4-head ViT, so the filter count may be part of the gap"
    )
    seeds = len(accs(HVC, F4))
    text = (
        f"the ConvMixer with 4 distinct spatial filters reached {acc(HVC, F4)} % ({seeds} seeds) against "
        f"{acc(VS, CNN)} % with one per channel ({cnn_drop.describe()}) and {acc(VS, PROJECTED)} % for the "
        f"4-head ViT ({over_vit.describe()}): {mechanism}"
    )
    shapes = (
        (H16, "16 heads of dim 4"),
        (W56, "width 56, depth 6 and 14 heads (the CNN's budget)"),
        (W48, "width 48, depth 8 and 12 heads (the CNN's budget)"),
    )
    for row, words in shapes:
        if kept(HVC, row):
            text += (
                f"; the ViT with {words} reached {acc(HVC, row)} % ({len(accs(HVC, row))} seeds), "
                f"{paired(HVC, row, PROJECTED, VS).describe()} against 4 heads and "
                f"{paired(HVC, row, CNN, VS).describe()} against the CNN"
            )
    return text


def normal(text: str) -> str:
    """Whitespace runs as one space: a page wraps its lines where it likes."""
    return " ".join(text.split())


def stated(page: str) -> list[str]:
    return [entry() for entry in STATED.get(page, [])]


def kept_sections(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside code blocks and outside sections whose runs are not kept."""
    out, levels, fenced = [], {}, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        heading = re.match(r"^(#+) ", line)
        if heading and not fenced:
            level = len(heading.group(1))
            levels = {k: v for k, v in levels.items() if k < level} | {level: NOT_KEPT in line.lower()}
            continue
        if not fenced and not any(levels.values()):
            out.append((number, line))
    return out


@pytest.mark.parametrize("page", sorted(STATED))
def test_every_stated_figure_is_what_the_kept_runs_give(page):
    text = normal((ROOT / page).read_text())
    missing = [expected for expected in stated(page) if normal(expected) not in text]
    assert not missing, f"{page} no longer states what the kept runs give; it should hold:\n\n" + "\n\n".join(
        missing
    )


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_mean_and_spread_a_page_gives_is_checked_against_a_kept_run(page):
    name = str(page.relative_to(ROOT))
    expected = stated(name)
    unchecked = [
        f"{name}:{number}: {match.group()}"
        for number, line in kept_sections(page.read_text())
        for match in FIGURE.finditer(line)
        if not any(match.group() in text for text in expected)
    ]
    assert not unchecked, (
        "figures no kept run backs (add an entry to STATED, or put them under a heading that says "
        f"'{NOT_KEPT}'):\n" + "\n".join(unchecked)
    )


def test_the_figures_convinit_recommend_gives_are_what_the_kept_runs_give():
    from convinit.train.recommendation import EVIDENCE

    assert EVIDENCE == recommended_evidence(), (
        "convinit.train.recommendation.EVIDENCE no longer states what the kept runs give; it should be:\n"
        + recommended_evidence()
    )


def test_the_heads_advice_convinit_recommend_gives_is_what_the_kept_runs_give():
    from convinit.train.recommendation import HEADS_EVIDENCE

    assert HEADS_EVIDENCE == heads_evidence(), (
        "convinit.train.recommendation.HEADS_EVIDENCE no longer states what the kept runs give; it should "
        "be:\n" + heads_evidence()
    )


def test_the_readme_has_no_section_of_runs_not_kept():
    headings = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("#")]
    assert not [h for h in headings if NOT_KEPT in h.lower()]


def test_a_figure_under_a_heading_of_runs_not_kept_is_exempt_and_nowhere_else():
    text = (
        "# A\n1.00 +- 0.10\n## Earlier (runs not kept)\n2.00 +- 0.20\n### detail\n3.00 +- 0.30\n## B\n4.00\n"
    )
    kept = [line for _, line in kept_sections(text)]
    assert kept == ["1.00 +- 0.10", "4.00"]


if __name__ == "__main__":
    for page_name in sorted(STATED):
        print(f"== {page_name}")
        for text in stated(page_name):
            print(text, end="\n\n")
    print("== src/convinit/train/recommendation.py (EVIDENCE)", recommended_evidence(), sep="\n")
    print("== src/convinit/train/recommendation.py (HEADS_EVIDENCE)", heads_evidence(), sep="\n")
    sys.exit(0)
