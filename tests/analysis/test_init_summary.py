"""A run's init_report.json, read back by reports and by a resume: a damaged one is named in a warning
and left out, never a traceback."""

from __future__ import annotations

import pytest

from convinit.analysis.init_summary import read_init_report


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
