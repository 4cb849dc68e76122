"""Reproductions: how checks are judged and how many seeds they ask for, on hand tables; the plumbing (pilot, one
extension, report, figures) on 2-step runs with 2 seeds. What the experiments find is measured in their reports,
never asserted here."""

import math

import numpy as np
import pandas as pd
import pytest
from test_effects import long_table

from agl_lab.config.lab_config import TASKS
from agl_lab.studies import reproduce
from agl_lab.studies.experiments import EXPERIMENTS, Check, Experiment, experiment_table
from agl_lab.studies.reproduce import judge, redraw_reproduction, run_reproduction, seeds_asked, seeds_for_effect
from agl_lab.studies.sweep import plan_sweep
from conftest import TINY_RUN


def experiment(*checks, shown=()):
    return Experiment("t", "a claim", "a source", {"base": (), "a": ()}, tuple(checks), shown=tuple(shown))


def hand_table():
    # a − base = +1, +2, +3 over seeds 0..2 (every step); "zero" is 0 for a, 1e-3 once for base
    values = {("base", s): [0.0, 0.0] for s in range(3)} | {("a", s): [s + 1.0, s + 1.0] for s in range(3)}
    table = long_table(values)
    zero = long_table({("a", s): [0.0, 1e-12] for s in range(3)} | {("base", 0): [0.0, 1e-3]}, metric="zero")
    return pd.concat([table, zero[zero.metric == "zero"]], ignore_index=True)


def test_checks_pass_on_the_expected_side_of_zero_and_fail_otherwise():
    checks, shown = judge(
        experiment(
            Check("a", "m", "higher", baseline="base"),  # +2 [−0.48, +4.5]: the interval holds 0 -> not passed
            Check("a", "m", "lower", baseline="base"),
            Check("a", "m", "higher", "last_20pct"),  # a's own values 1, 2, 3 against 0: [−0.48, +4.5]
            Check("a", "zero", "zero"),
            Check("base", "zero", "zero"),
            Check("nobody", "m", "higher", baseline="base"),
            shown=[Check("a", "other", "none", baseline="base")],
        ),
        hand_table(),
    )
    assert checks["passed"].tolist() == [False, False, False, True, False, False]
    assert checks["outcome"].tolist() == ["unresolved", "unresolved", "unresolved", "as claimed", "not zero",
                                          "not judged"]  # fmt: skip
    assert checks.loc[0, "mean_diff"] == 2.0 and checks.loc[0, "n_pairs"] == 3 and checks.loc[0, "expect"] == "higher"
    assert checks.loc[2, "baseline"] == "0" and checks.loc[2, "verdict"].startswith("a (m): +2.0 [")
    assert checks.loc[3, "verdict"] == "a: zero within ±1e-09 at every step of 3 runs (largest |value| 1e-12)"
    assert checks.loc[4, "mean_diff"] == 1e-3
    assert checks.loc[5, "verdict"] == "nobody: not judged: no finished run of 'nobody'"
    assert shown["verdict"].tolist() == ["a − base: +0 [+0, +0], p=n/a, n=3 pairs; no pair differs"]
    assert shown["passed"].isna().all()


def test_a_clear_effect_passes_and_its_reverse_is_opposite_to_the_claim():
    table = long_table({("base", s): [0.0] for s in range(3)} | {("a", s): [5 + 0.1 * s] for s in range(3)})
    checks, _ = judge(experiment(Check("a", "m", "higher", baseline="base"), Check("a", "m", "lower", "all", "base")),
                      table)  # fmt: skip
    assert checks["passed"].tolist() == [True, False]
    assert checks["outcome"].tolist() == ["as claimed", "opposite to the claim"]


def test_seeds_asked_is_the_most_any_unresolved_check_needs():
    def frame(*rows):
        return pd.DataFrame(rows, columns=["passed", "expect", "seeds_needed"])

    assert seeds_asked(frame((True, "higher", 40.0), (True, "zero", np.nan))) is None
    assert seeds_asked(frame((False, "higher", 12.0), (False, "lower", 7.0), (True, "higher", 99.0))) == 12.0
    assert seeds_asked(frame((False, "higher", np.nan))) == math.inf  # fewer than 2 pairs: cannot say
    assert seeds_asked(frame((False, "zero", np.nan), (True, "lower", 3.0))) is None  # more seeds cannot fix a zero


def test_every_experiment_composes_names_its_own_settings_and_says_where_its_claim_is_from(tmp_path):
    assert set(EXPERIMENTS) >= {"row-split", "length-bias", "update-cap"}
    for name, entry in EXPERIMENTS.items():
        assert entry.name == name and entry.claim and entry.source
        for check in (*entry.checks, *entry.shown):
            assert check.setting in entry.settings and check.baseline in (None, *entry.settings), (name, check)
        plan_sweep(entry.settings, [0], sweep_dir=tmp_path / name, dotlist=[*entry.dotlist, *TINY_RUN])
    assert "lock" in TASKS and "arXiv:2503.20783" in EXPERIMENTS["length-bias"].source
    table = experiment_table()
    assert (
        table.index.tolist() == list(EXPERIMENTS)
        and "lab/ppo_updates (all) lower than both_on" in table.loc["update-cap", "checks"]
    )


def test_a_pilot_then_one_extension_then_the_report(tmp_path, monkeypatch):
    # two settings that train identically (the project name changes nothing learned): every pair differs by 0, so
    # the check asks for more pairs than any number and the pilot of 2 extends once, to the cap of 3
    same = Experiment(
        "same",
        "two settings that differ in nothing learned",
        "tests/test_reproduce.py",
        {"base": (), "renamed": ("trainer.project_name=elsewhere",)},
        (
            Check("renamed", "lab/success_rate", "higher", "last_20pct", baseline="base"),
            Check("base", "lab/multi_row_overweight", "zero"),  # per_rollout_mean, Agent Lightning's default
        ),
        shown=(Check("renamed", "lab/multi_row_overweight", "none", baseline="base"),),
        dotlist=("lab.wandb_mode=disabled",),
        note="a note",
    )
    monkeypatch.setitem(EXPERIMENTS, "same", same)
    out = tmp_path / "reproduce-same"
    result = run_reproduction("same", pilot_seeds=2, max_seeds=3, out_dir=out, dotlist=TINY_RUN, executor="serial",
                              progress=False)  # fmt: skip
    assert result.seeds == [0, 1, 2] and result.seeds_asked == math.inf and result.pilot_seeds == 2
    assert result.sweep.cells["status"].tolist() == ["done"] * 6
    assert not result.reproduced and result.checks["n_pairs"].tolist() == [3, 3] and result.resumed_runs == 0
    assert set(result.sweep.table.metric) >= {check.metric for e in EXPERIMENTS.values() for check in e.checks}
    report = (out / "report.md").read_text()
    assert report.startswith("# Reproduction `same`: NOT reproduced (the tiny policy on the lock task)\n")
    zero = next(line for line in report.splitlines() if line.startswith("| base |"))
    assert zero.count(" | ") == 4 and "largest \\|value\\|" in zero  # one table row: its pipes escaped
    for text in (
        "**Claim.** two settings",
        "**Source.** tests/test_reproduce.py",
        "of 2 checks did not pass at 3",
        "| renamed − base | `lab/success_rate`, `last_20pct` | > 0 | +0 [+0, +0], p=n/a, n=3 pairs; no pair "
        "differs | **no**: unresolved |",
        "a pilot of 2; its unresolved checks asked for more than any number",
        "cap 3; ran seeds 0–2 (3)",
        "- note: a note",
        "## Per setting (means over seeds)",
        "![forest](forest.png)",
    ):
        assert text in report, text  # fmt: skip
    for name in ("effects.csv", "summary.csv", "forest.png", "bands-lab_success_rate.png", "report.md"):
        assert (out / name).stat().st_size > 0 and result.figures[name.removesuffix(".png")] == out / name
    assert pd.read_csv(out / "effects.csv")["expect"].tolist() == ["higher", "zero", "none"]
    # the same call again: every run finished, so nothing runs, and the report says so beside this call's wall time
    again = run_reproduction("same", pilot_seeds=2, max_seeds=3, out_dir=out, dotlist=TINY_RUN, executor="serial",
                             progress=False)  # fmt: skip
    assert again.resumed_runs == 6 and again.seeds == [0, 1, 2]
    assert "(6 of the 6 runs had finished before it and were skipped)" in (out / "report.md").read_text()


def test_bad_seed_counts_and_names_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match=r"need 2 <= pilot seeds <= max seeds \(--pilot-seeds, --max-seeds\), got 1"):
        run_reproduction("update-cap", pilot_seeds=1, out_dir=tmp_path / "x")
    with pytest.raises(ValueError, match="got 5 and 4"):
        run_reproduction("update-cap", pilot_seeds=5, max_seeds=4, out_dir=tmp_path / "x")
    with pytest.raises(ValueError, match=r"unknown experiment 'nope'; choose one of \['row-split', 'length-bias'"):
        run_reproduction("nope", out_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists() and reproduce.ZERO_TOL == 1e-9


def test_turn_index_bias_runs_tiny_and_writes_its_report(tmp_path):
    out = tmp_path / "reproduce-turn-index-bias"
    tiny = [*TINY_RUN, "lab.wandb_mode=disabled"]
    result = run_reproduction("turn-index-bias", pilot_seeds=2, max_seeds=2, out_dir=out, dotlist=tiny,
                              executor="serial", progress=False)  # fmt: skip
    assert result.sweep.cells["status"].tolist() == ["done"] * 8 and result.seeds == [0, 1]
    assert result.checks["metric"].tolist() == ["lab/mean_turns"] * 2 and len(result.shown) == 9
    table = result.sweep.table
    # per-turn credit ran where it was asked for (its metrics), rollout-level advantage elsewhere
    per_turn = set(table.loc[table.metric == "training/turn_level_advantage/n_turns", "setting"])
    assert per_turn == {"mt_grpo", "mt_grpo_fix", "turn_grpo"}
    assert set(table.loc[table.metric == "training/rollout_level_advantage/n_rows", "setting"]) == {"rollout_level"}
    report = (out / "report.md").read_text()
    assert report.startswith("# Reproduction `turn-index-bias`: ") and "verl RFC #7244" in report


def test_a_study_asks_for_the_pairs_its_smallest_effect_needs_given_the_pilots_spread():
    # a − base: +1, +2, +3 (sd 1): to detect 0.5 (half an sd) at 80% power a paired t-test needs 34 pairs
    # (statsmodels TTestPower, d = 0.5); the one-sample check against 0 has no baseline and asks for nothing
    checks, shown = judge(experiment(shown=[Check("a", "m", "none", baseline="base"), Check("a", "m", "none")]),
                          hand_table())  # fmt: skip
    assert seeds_for_effect(shown, 0.5) == 34.0
    assert seeds_for_effect(shown, 1.0) == 10.0  # d = 1
    one_pair = long_table({("base", 0): [0.0], ("a", 0): [1.0]})
    _, shown = judge(experiment(shown=[Check("a", "m", "none", baseline="base")]), one_pair)
    assert seeds_for_effect(shown, 0.5) == math.inf  # no spread from one pair: cannot say


def test_a_reproductions_record_redraws_its_report_without_training(tmp_path, monkeypatch):
    study = Experiment(
        "study",
        "does renaming the project change success?",
        "tests/test_reproduce.py",
        {"base": (), "renamed": ("trainer.project_name=elsewhere",)},
        (),
        shown=(Check("renamed", "lab/success_rate", "none", "last_20pct", baseline="base"),),
        dotlist=("lab.wandb_mode=disabled",),
        smallest_effect=0.1,
    )
    monkeypatch.setitem(EXPERIMENTS, "study", study)
    out = tmp_path / "reproduce-study"
    result = run_reproduction("study", pilot_seeds=2, max_seeds=2, out_dir=out, dotlist=TINY_RUN, executor="serial",
                              progress=False)  # fmt: skip
    assert result.is_study and result.seeds == [0, 1]
    report = (out / "report.md").read_text()
    assert report.startswith("# Study `study` (the tiny policy on the lock task)\n")
    assert "**Question.** does renaming" in report and "0 of 1 comparisons resolved" in report
    assert "the power analysis for an effect of 0.1 asked for" in report and "- recorded 20" in report
    record = out / "record"
    assert sorted(p.name for p in record.iterdir()) == ["cells.csv", "meta.json", "table.csv.gz"]
    redrawn = redraw_reproduction("study", record=record, out_dir=tmp_path / "redrawn")
    assert (tmp_path / "redrawn" / "report.md").read_text() == report  # the same report, nothing trained
    assert redrawn.meta["played"] == "(the tiny policy on the lock task)" and len(redrawn.sweep.cells) == 4
    with pytest.raises(ValueError, match="records the experiment 'study', not 'update-cap'"):
        redraw_reproduction("update-cap", record=record, out_dir=tmp_path / "x")
    with pytest.raises(FileNotFoundError, match=r"is no reproduction record \(missing table.csv.gz, cells.csv"):
        redraw_reproduction("study", record=tmp_path, out_dir=tmp_path / "x")
    with pytest.raises(FileNotFoundError, match=r"no record at .*nowhere: run `agl-lab reproduce study` first"):
        redraw_reproduction("study", record=tmp_path / "nowhere", out_dir=tmp_path / "x")
