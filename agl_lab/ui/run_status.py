"""What the training panel says about a run: its last step in a line, where its files and its W&B run are, and which
demo setting it is (so it is drawn in that setting's colour). Notebook: ``notebooks/03_short_training_runs.ipynb``.
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from agl_lab.config.settings import DEMO_SETTINGS
from agl_lab.config.tree import leaves
from agl_lab.core.keys import N_ROLLOUTS, N_SAMPLE, N_SAMPLE_TRAINED, SUCCESS_RATE

__all__ = ["demo_setting_name", "last_step", "links_html", "shown_path"]


def last_step(history: pd.DataFrame) -> str:
    if not len(history):
        return ""
    last = history.iloc[-1]
    if SUCCESS_RATE not in last or pd.isna(last[SUCCESS_RATE]):  # step 0: the held-out evaluation before training
        return ""
    return (
        f"success {last[SUCCESS_RATE]:.2f}, {int(last[N_SAMPLE])} rows from "
        f"{int(last[N_ROLLOUTS])} rollouts, {int(last[N_SAMPLE_TRAINED])} trained"
    )


def demo_setting_name(cfg: DictConfig) -> str:
    """The demo setting (``DEMO_SETTINGS``) whose keys ``cfg`` holds, so the run is drawn in its colour; else
    ``"this run"``."""
    for name, items in DEMO_SETTINGS.items():
        wanted = leaves(OmegaConf.to_container(OmegaConf.from_dotlist(list(items))))
        if all(OmegaConf.select(cfg, key, default=None) == value for key, value in wanted):
            return name
    return "this run"


def shown_path(path) -> str:
    """A path as the notebook's reader knows it: relative to the working directory when inside it."""
    path = Path(path)
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def links_html(result) -> str:
    """The run directory and where its W&B run is (a link when online, the folder and `wandb sync` when offline)."""
    parts = [f"Run directory: <code>{html.escape(shown_path(result.run_dir))}</code>"]
    where = result.wandb_run
    if where and where.startswith("http"):
        parts.append(f'W&B run: <a href="{html.escape(where)}" target="_blank">{html.escape(where)}</a>')
    elif where:
        parts.append(
            f"W&B run (offline): <code>{html.escape(shown_path(where))}</code> — upload with <code>wandb sync</code>"
        )
    return "<br>".join(parts)
