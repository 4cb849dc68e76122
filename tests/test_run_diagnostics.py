"""A run's weighting diagnostics step by step: the numpy path equal to the verl path on the same rows, a verl dump's
missing token counts said per mode (never guessed), the whole run from its steps, a class for every row count,
verl's estimator where numpy has none, an agl_lab run from its logged metrics, and the refusals."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

import agl_lab
from agl_lab import LOSS_MODES, short_run_config
from agl_lab.files.batch_io import load_batch, sample_batch_path
from agl_lab.files.verl_dump import write_verl_dump
from agl_lab.lab.diagnostics import batch_diagnostics
from agl_lab.lab.row_diagnostics import COLUMNS, MODE_COLUMNS
from agl_lab.lab.run_diagnostics import STEP_COLUMNS
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows
from conftest import TINY_RUN

NUMBERS = COLUMNS[1:]


def assert_same_table(got, expected, *, modes=None):
    got, expected = got.set_index("mode"), expected.set_index("mode")
    modes = modes or list(expected.index)
    np.testing.assert_allclose(
        got.loc[modes, NUMBERS].to_numpy(float), expected.loc[modes, NUMBERS].to_numpy(float), rtol=1e-12, atol=1e-15
    )


def assert_same_influence(got, expected, *, modes):
    columns = ["rollouts", "rollout_share", "gradient_share", "failure_fraction"]
    for mode in modes:
        a = got[got["mode"] == mode].set_index("rows_per_rollout")[columns]
        b = expected[expected["mode"] == mode].set_index("rows_per_rollout")[columns]
        assert list(a.index) == list(b.index), mode
        np.testing.assert_allclose(a.to_numpy(float), b.to_numpy(float), rtol=1e-12, atol=1e-15, err_msg=mode)


def test_the_sample_batch_read_with_numpy_gives_the_verl_paths_table():
    fast = agl_lab.weighting_diagnostics(sample_batch_path())
    slow = batch_diagnostics(load_batch(sample_batch_path()), short_run_config())
    assert list(fast.columns) == [*COLUMNS, "missing"] and (fast["missing"] == "").all()
    assert_same_table(fast, slow)
    assert_same_influence(fast.attrs["influence"], slow.attrs["influence"], modes=list(LOSS_MODES))


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("rollout_level", ["true", "false"])
def test_random_batches_with_marked_rows_equal_the_verl_path(tmp_path, seed, rollout_level):
    # transition level: a later call's prompt holds the whole context, so past max_prompt_length it is cut and its
    # row marked; the diagnostics leave marked rows out
    knobs = SyntheticKnobs(n_prompts=12, rollouts_per_prompt=6, level="transition", max_prompt_length=48, seed=seed)
    rows, _ = synthetic_rows(knobs)
    assert rows.batch["is_drop_mask"].any()
    cfg = short_run_config(
        dotlist=[
            f"algorithm.enable_rollout_level_advantage={rollout_level}",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        ]
    )
    rows.save_to_disk(tmp_path / "rows.pkl")
    fast = agl_lab.weighting_diagnostics(tmp_path / "rows.pkl", trusted=True, cfg=cfg)
    assert_same_table(fast, batch_diagnostics(rows, cfg))


@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bool])
def test_the_mask_dtype_changes_nothing(tmp_path, mask_dtype):
    rows = load_batch(sample_batch_path())
    reference = agl_lab.weighting_diagnostics(sample_batch_path())
    rows.batch["response_mask"] = rows.batch["response_mask"].to(mask_dtype)
    rows.save_to_disk(tmp_path / "rows.pkl")
    assert_same_table(agl_lab.weighting_diagnostics(tmp_path / "rows.pkl", trusted=True), reference)


def dump_run(folder, steps, **knobs):
    """Agent rows at the transition level, one batch per step, dumped by verl's own writer; returns the batches."""
    batches = {}
    for step in steps:
        rows, _ = synthetic_rows(SyntheticKnobs(level="transition", seed=step, **knobs))
        # verl's trainer keeps scores in float32 (Agent Lightning's in bf16), and a dump keeps no dtype: float32 is read
        rows.batch["token_level_scores"] = rows.batch["token_level_scores"].float()
        batches[step] = rows
        write_verl_dump(rows, folder, step=step)
    return batches


def test_a_verl_dump_says_which_numbers_need_token_counts(tmp_path):
    batches = dump_run(tmp_path / "dump", (1, 2), n_prompts=8, rollouts_per_prompt=4, fail_extra_calls=5)
    steps = agl_lab.weighting_diagnostics(tmp_path / "dump", by_step=True)
    assert list(steps.columns) == STEP_COLUMNS and steps["step"].unique().tolist() == [1, 2]
    for step, rows in batches.items():
        # the same rows with their token counts, and groups = the dataset items (what the dump's prompts give)
        rows.save_to_disk(tmp_path / f"{step}.pkl")
        known = agl_lab.weighting_diagnostics(tmp_path / f"{step}.pkl", trusted=True).set_index("mode")
        part = steps[steps["step"] == step].set_index("mode")
        for mode in LOSS_MODES:
            line, truth = part.loc[mode], known.loc[mode]
            for column in NUMBERS:
                if pd.isna(line[column]):
                    assert "response_tokens" in line["missing"], (mode, column)
                else:  # reported: it does not depend on the counts, so it is the true value
                    assert line[column] == pytest.approx(truth[column], rel=1e-6, abs=1e-9), (mode, column)
    line = steps.set_index(["step", "mode"])
    assert (line.loc[(1, "seq-mean-token-mean"), "missing"], line.loc[(1, "session_equal"), "missing"]) == ("", "")
    assert line.loc[(1, "token-mean"), MODE_COLUMNS].isna().all()  # by row, gap, cosine, ESS: all need the counts
    prm = line.loc[(1, "per_rollout_mean:rows")]  # each rollout 1/R: the solve rate needs no counts, the ESS does
    assert prm["gap"] == pytest.approx(0, abs=1e-12) and np.isnan(prm["ess_fraction"])


def test_the_whole_run_from_its_steps_and_a_class_for_every_row_count(tmp_path):
    dump_run(tmp_path / "dump", (1, 2, 3), n_prompts=6, calls="uniform", min_calls=1, max_calls=13)
    steps = agl_lab.weighting_diagnostics(tmp_path / "dump", by_step=True, steps="2-3", modes=["session_equal"])
    whole = agl_lab.weighting_diagnostics(tmp_path / "dump", steps="2-3", modes=["session_equal"])
    assert steps["step"].tolist() == [2, 3] and whole.attrs["steps"] == 2
    assert whole["trajectories"].item() == steps["trajectories"].sum() and whole["rows"].item() == steps["rows"].sum()
    for column in ("solve_by_trajectory", "gap", "adv_cosine", "ess_fraction"):
        assert whole[column].item() == pytest.approx(steps[column].mean(), rel=1e-12)
    influence = whole.attrs["influence"]
    sizes = pd.concat([agl_lab.read_run(tmp_path / "dump", steps=s).groupby("trajectory").size() for s in (2, 3)])
    assert influence["rows_per_rollout"].tolist() == [str(k) for k in sorted(sizes.unique())]  # 10, 11, … included
    assert {"10", "12", "13"} <= set(influence["rows_per_rollout"])
    assert influence["rollouts"].tolist() == sizes.value_counts().sort_index().tolist()
    assert influence["gradient_share"].sum() == pytest.approx(1.0)


def test_a_2000_row_step_every_mode(tmp_path):
    dump_run(tmp_path / "dump", (1,), n_prompts=60, rollouts_per_prompt=8, calls="uniform", min_calls=1, max_calls=10)
    table = agl_lab.weighting_diagnostics(tmp_path / "dump")
    assert table["rows"].iloc[0] > 2000 and list(table["mode"]) == list(LOSS_MODES)
    assert table.set_index("mode").loc["session_equal", "gap"] == pytest.approx(0, abs=1e-12)


def test_an_estimator_without_a_numpy_path_runs_verls_and_one_without_row_rewards_is_said(tmp_path):
    rows, _ = synthetic_rows(SyntheticKnobs(n_prompts=6, rollouts_per_prompt=4, seed=4))
    rows.save_to_disk(tmp_path / "rows.pkl")
    rloo = short_run_config(dotlist=["algorithm.adv_estimator=rloo"])
    fast = agl_lab.weighting_diagnostics(tmp_path / "rows.pkl", trusted=True, cfg=rloo)
    assert_same_table(fast, batch_diagnostics(rows, rloo))
    gae = short_run_config(dotlist=["algorithm.adv_estimator=gae", "algorithm.enable_rollout_level_advantage=false"])
    table = agl_lab.weighting_diagnostics(tmp_path / "rows.pkl", trusted=True, cfg=gae)
    assert table["adv_cosine"].isna().all() and table["missing"].str.contains("advantage").all()
    assert table["solve_by_row"].notna().all()  # what needs no advantage is still measured


def test_modes_empty_or_a_string_is_named():
    for modes, text in (([], "modes is empty"), ("session_equal", "modes must be a list")):
        with pytest.raises(ValueError, match=text):
            agl_lab.weighting_diagnostics(sample_batch_path(), modes=modes)
        with pytest.raises(ValueError, match=text):
            agl_lab.weighting_diagnostics(load_batch(sample_batch_path()), modes=modes)


def test_an_agl_lab_run_by_step_from_its_metrics_and_a_step_logged_twice(tmp_path):
    cfg = short_run_config(
        dotlist=[*TINY_RUN, "trainer.logger=[]", "trainer.total_training_steps=3", f"lab.run_dir={tmp_path / 'run'}"]
    )
    agl_lab.train(cfg, progress=False)
    run = tmp_path / "run"
    steps = agl_lab.weighting_diagnostics(run, by_step=True, modes=["session_equal", "seq-mean-token-mean"])
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps["step"].unique().tolist() == [m["step"] for m in logged]
    for metrics in logged:
        line = steps[(steps["step"] == metrics["step"]) & (steps["mode"] == "session_equal")].iloc[0]
        assert line["gap"] == metrics["lab/diagnostics/session_equal/gap"]
        assert line["trajectories"] == metrics["lab/diagnostics/trajectories"]
    whole = agl_lab.weighting_diagnostics(run, modes=["session_equal"])
    assert whole["rows"].item() == sum(m["lab/diagnostics/rows"] for m in logged)
    with (run / "metrics.jsonl").open("a") as f:  # a resumed run appended step 2 again
        f.write(json.dumps(logged[1]) + "\n")
    with pytest.raises(ValueError, match=r"metrics\.jsonl, line 4: lab/success_rate is logged a second time at step 2"):
        agl_lab.weighting_diagnostics(run)


def test_a_batch_by_step_is_one_step_with_the_batchs_own_step():
    rows = load_batch(sample_batch_path())
    rows.meta_info["global_steps"] = 7
    steps = agl_lab.weighting_diagnostics(rows, by_step=True, modes=["session_equal", "token-mean"])
    whole = agl_lab.weighting_diagnostics(rows, modes=["session_equal", "token-mean"])
    assert list(steps.columns) == STEP_COLUMNS and steps["step"].tolist() == [7, 7]
    assert_same_table(steps.drop(columns=["step"]), whole)
    assert steps.attrs["influence"]["step"].unique().tolist() == [7]


def test_rows_agent_lightnings_rollout_level_refuses_are_one_error_naming_the_file_and_the_fix(tmp_path):
    from agl_lab.files.batch_io import save_batch
    from conftest import make_rows

    # rollout a's first row has no trainable token: Agent Lightning reads the rollout's advantage there, and refuses
    rows = make_rows([("p0", "a", 1.0, [2, 1]), ("p0", "b", 0.0, [2])], masks=[[0, 0], [1], [1, 1]])
    path = save_batch(rows, tmp_path / "batch")
    message = r"batch: rollout-level advantage cannot extract advantages for empty rollout_id='a', as Agent Lightning"
    with pytest.raises(ValueError, match=message + r".*enable_rollout_level_advantage=false\) or fix the rows$"):
        agl_lab.weighting_diagnostics(path)
    row_level = short_run_config(dotlist=["algorithm.enable_rollout_level_advantage=false"])
    assert agl_lab.weighting_diagnostics(path, cfg=row_level)["trajectories"].eq(2).all()
