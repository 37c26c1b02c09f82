"""``benchmarks/run --against``: the arguments each tree's run gets, and the side-by-side table."""

from __future__ import annotations

from pathlib import Path

from benchmarks.against import render, without


def test_each_tree_runs_with_the_arguments_less_the_comparison_options():
    argv = ["--against", "../base", "--only", "throughput", "--rounds=3", "--repeat", "1"]
    assert without(argv, ["--against", "--rounds"]) == ["--only", "throughput", "--repeat", "1"]


def test_the_table_gives_both_medians_and_the_median_of_the_per_round_ratios():
    ours = [{"throughput": {"runjobs_c2": r}, "enqueue_tx": {"django_jobs": 1.0}} for r in (100, 300, 200)]
    theirs = [{"throughput": {"runjobs_c2": r}, "enqueue_tx": {"django_jobs": 2.0}} for r in (100, 100, 400)]
    table = render(ours, theirs, Path("/x/base"))
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if line.startswith("| ")}
    # medians 200 against 100; per-round ratios 1.0, 3.0, 0.5: their median is 1.0, not 200 / 100
    assert rows["throughput runjobs_c2, jobs/s"] == (
        "| throughput runjobs_c2, jobs/s | 200.000 | 100.000 | 1.000 | 1.00 3.00 0.50 |"
    )
    assert "| 0.500 |" in rows["enqueue in one atomic(), s"]


def test_the_setups_section_is_compared_setup_by_setup():
    ours = [{"setups": {"fast": {"runjobs_c2": r, "enqueue_tx_s": 1.0}}} for r in (300, 400)]
    theirs = [{"setups": {"fast": {"runjobs_c2": r, "enqueue_tx_s": 0.8}}} for r in (300, 200)]
    table = render(ours, theirs, Path("/x/base"))
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if line.startswith("| ")}
    assert (
        rows["setup fast, runjobs_c2"] == "| setup fast, runjobs_c2 | 350.000 | 250.000 | 1.500 | 1.00 2.00 |"
    )
    assert "| 1.250 |" in rows["setup fast, enqueue_tx_s"]
