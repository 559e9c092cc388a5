"""A run's init_report.json, read back by reports and by a resume: a damaged one is named in a warning
and left out, never a traceback."""

from __future__ import annotations

import pytest

from convinit.analysis.init_summary import init_rows, read_init_report


@pytest.mark.parametrize(
    "text", ["{", "[1, 2]", '{"real_pass": [1]}', '{"real_pass": {"mean_mass": "high"}}']
)
def test_a_damaged_init_report_is_named_in_a_warning_and_not_used(tmp_path, text):
    (tmp_path / "init_report.json").write_text(text)
    with pytest.warns(UserWarning, match=r"init_report\.json is damaged"):
        assert read_init_report(tmp_path) is None


def test_an_intact_init_report_is_read_whole(tmp_path):
    (tmp_path / "init_report.json").write_text('{"scheme": "impulse", "real_pass": {"mean_mass": 0.9}}')
    assert read_init_report(tmp_path) == {"scheme": "impulse", "real_pass": {"mean_mass": 0.9}}


def test_a_run_whose_init_found_no_attention_layer_says_so_in_the_init_table(tmp_path):
    report = '{"scheme": "random", "no_attention_left": "every attention layer ... was converted to GPSA"}'
    (tmp_path / "init_report.json").write_text(report)
    [row] = init_rows([("ViT, GPSA in every block", [tmp_path])])
    assert row["qk_input"] == "none: no attention layer left" and row["entropy"] is None
