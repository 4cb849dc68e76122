"""A step's rows as a recording: the table's checks, files written whole or not at all, the diagnostics' config.
The recorder on Agent Lightning's own trainer step is in test_agl_recorder.py."""

import numpy as np
import pandas as pd
import pytest
import torch
from agl_oracle import agl_config, make_rows
from omegaconf import OmegaConf

from agl_lab.lab.loss_scale import weighing_mode
from agl_lab.training.recording import ROW, SCHEMA, diagnostics_config, step_rows, write_step


def rows(n=4):
    batch = make_rows(lengths=[1, 2, 3, 1][:n], width=3, rollout_ids=np.array(list("aabc"[:n]), dtype=object),
                      data_ids=np.array(["p"] * n, dtype=object), rewards=[1.0, 1.0, 0.0, 0.5][:n])  # fmt: skip
    batch.non_tensor_batch["uid"] = batch.non_tensor_batch["data_id_list"]
    batch.non_tensor_batch[ROW] = np.arange(n)
    return batch


def test_step_rows_holds_every_row_with_the_kept_ones_advantages():
    batch = rows()
    kept = batch[[2, 0]]  # the actor's order need not be the rollout's
    advantages = torch.tensor([[-1.0, -1.0, -1.0], [0.5, 0.0, 0.0]])  # (kept, R) under each row's mask
    frame = step_rows(batch, kept, advantages, step=7)
    assert frame["advantage"].iloc[[0, 2]].tolist() == [0.5, -1.0] and frame["advantage"].iloc[[1, 3]].isna().all()
    assert frame["kept"].tolist() == [True, False, True, False] and (frame["step"] == 7).all()
    assert frame["reward"].tolist() == [1.0, 1.0, 0.0, 0.5] and frame["response_tokens"].tolist() == [1, 2, 3, 1]


def test_step_rows_refuses_what_does_not_fit_together():
    batch = rows()
    batch.non_tensor_batch[ROW] = np.array([0, 2, 1, 3])
    with pytest.raises(ValueError, match="must number the step's rows 0..3 in order"):
        step_rows(batch, None, None, step=1)
    with pytest.raises(ValueError, match=r"advantages must hold one line per kept row \(2\)"):
        step_rows(rows(), rows()[[0, 1]], torch.zeros(3, 3), step=1)
    marked = rows()
    marked.batch["is_drop_mask"] = torch.tensor([False, True, False, False])
    with pytest.raises(ValueError, match="a row marked is_drop_mask reached the actor"):
        step_rows(marked, marked[[1]], torch.zeros(1, 3), step=1)


def test_step_files_are_written_whole_or_not_at_all(tmp_path):
    frame = step_rows(rows(), None, None, step=3)
    path = write_step(tmp_path, frame)
    assert path == tmp_path / "3.parquet" and pd.read_parquet(path).equals(frame)
    assert pq_types(path) == {field.name: str(field.type) for field in SCHEMA}
    with pytest.raises(ValueError, match=r"a step file holds one step; got steps \[3, 4\]"):
        write_step(tmp_path, pd.concat([frame, frame.assign(step=4)]))
    (tmp_path / "5.parquet").mkdir()  # the rename over it fails: the error names the file, no temporary is left
    with pytest.raises(OSError, match="5.parquet"):
        write_step(tmp_path, frame.assign(step=5))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3.parquet", "5.parquet"]


def pq_types(path):
    import pyarrow.parquet as pq

    return {field.name: str(field.type) for field in pq.read_schema(path)}


def test_diagnostics_config_says_agent_lightnings_divisor_without_touching_the_config():
    cfg = agl_config()
    OmegaConf.set_struct(cfg, True)  # a user's script may keep struct mode on
    view = diagnostics_config(cfg)
    assert weighing_mode(cfg) is None and weighing_mode(view) == "per_rollout_mean:rows"
    assert OmegaConf.select(cfg, "lab") is None
    view.lab.per_rollout_divisor = "rollouts"
    assert diagnostics_config(view) is view  # a divisor already set is the config's own
