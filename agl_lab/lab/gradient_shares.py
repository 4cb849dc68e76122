"""Each rollout's weight measured on a policy's actual gradient, beside the closed form, per loss mode.

The closed forms (:mod:`agl_lab.core.weights`) say how much each token counts in a mode's loss. Here the step's
gradient is taken for real: a policy scores a batch of kept rows (a step of a short run), each trainable mode's loss
comes from verl's registry with the trainer's advantages (normalized where the loss needs it) and runs over mini-
and micro-batches with ``global_batch_info`` as verl's engine does, at ratio 1 (a step's first update), and
autograd gives ``g = ∇θ L``. Per-sample gradients (``torch.func``'s batched backward) give each row's direction
``u_i = ∇θ mean_t log π_{i,t}``; since every mode weighs all tokens of a row alike, ``g = Σ_i y_i·u_i`` with
``y_i = −n_i·w_i·A_i``, and least squares over the rows (their per-sample gradients are independent) recovers
each ``y_i`` from ``g`` alone. Per rollout:

* ``measured_mass`` = ``−Σ y_i`` (its gradient mass), beside ``closed_form_mass`` (the analysis's);
* ``measured_weight`` = ``Σ −y_i / A_i`` (NaN when a row's advantage is 0), beside ``closed_form_weight``;
* ``gradient_share`` = ``⟨g_r, g⟩ / ‖g‖²`` with ``g_r = Σ_{i∈r} y_i·u_i``: how much of the step's update the
  rollout drives (shares add up to 1), which depends on the directions too, not only on the weights.

Measured and closed form agree wherever the closed form is exact (every trainable mode; the tests hold them to it).
Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig
from verl import DataProto
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.utils.config import omega_conf_to_dataclass

from agl_lab.config.modes import trainable_modes
from agl_lab.config.settings import configure, setting_overrides
from agl_lab.core.pipeline import compute_advantages
from agl_lab.core.row_sums import trainable_tokens
from agl_lab.lab.weighting import analyze_weighting

__all__ = ["agreement", "gradient_shares", "row_gradients"]

LogProbs = Callable[[DataProto], torch.Tensor]  # kept rows → (rows, R) log-probs of their responses, differentiable


def gradient_shares(
    batch: DataProto,
    cfg: DictConfig,
    *,
    log_probs: LogProbs,
    parameters: Sequence[torch.Tensor],
    modes: Sequence[str] | None = None,
    rollout_level: bool = True,
    dp_size: int = 1,
) -> pd.DataFrame:
    """One line per (mode, rollout): closed-form and measured weight and mass, and the rollout's gradient share.

    ``batch``: the kept rows of a step (``agl_lab.select_rows``'s result: whole mini-batches, ``uid`` set) with the
    fields ``log_probs`` reads; ``cfg``: the composed config (estimator, mini- and micro-batch sizes);
    ``parameters``: the tensors whose gradient is measured (e.g. ``model.parameters()``). ``modes``: trainable
    catalogue modes (default: all of them).
    """
    modes = list(modes) if modes is not None else trainable_modes()
    _, directions = row_gradients(batch, log_probs=log_probs, parameters=parameters)  # (rows, P)
    gram = directions @ directions.T  # (rows, rows): least squares through the normal equations, in float64
    log_prob = log_probs(batch)  # (rows, R): one forward, its graph kept for every mode's backward
    lines = []
    for mode in modes:
        mode_cfg = _with_settings(cfg, mode, rollout_level)
        work = DataProto(batch=batch.batch.clone(), non_tensor_batch=dict(batch.non_tensor_batch), meta_info={})
        work, _ = compute_advantages(work, mode_cfg)  # the trainer's advantages, normalized where the loss does
        gradient = _step_gradient(work, mode_cfg, log_prob=log_prob, parameters=parameters, dp_size=dp_size)
        projections = directions @ gradient  # (rows,) ⟨u_i, g⟩
        y = torch.linalg.solve(gram, projections)  # (rows,) g = Σ_i y_i·u_i
        raw, _ = analyze_weighting(batch, mode_cfg, modes=[mode], rollout_levels=(rollout_level,), dp_size=dp_size)
        lines.append(_per_rollout(raw, mode, rollout_level, y.numpy(), projections, gradient @ gradient))
    return pd.concat(lines, ignore_index=True)


def agreement(shares: pd.DataFrame) -> pd.DataFrame:
    """Per mode: how far the measured weights are from the closed forms (largest relative gap), and how far the
    rollouts' gradient shares are from their weight shares (largest gap, and the rank correlation of the two)."""
    lines = {}
    for mode, frame in shares.groupby("mode", sort=False):
        known = frame.dropna(subset=["measured_weight"])
        gap = (known["measured_weight"] - known["closed_form_weight"]).abs() / known["closed_form_weight"].abs()
        weight_share = frame["closed_form_weight"] / frame["closed_form_weight"].sum()
        lines[mode] = {
            "rollouts": len(frame),
            "measured vs closed form (max rel. gap)": gap.max(),
            "gradient share vs weight share (max gap)": (frame["gradient_share"] - weight_share).abs().max(),
            "rank correlation": frame["gradient_share"].rank().corr(weight_share.rank()),
        }
    return pd.DataFrame.from_dict(lines, orient="index")


def row_gradients(
    batch: DataProto, *, log_probs: LogProbs, parameters: Sequence[torch.Tensor], chunk: int = 8
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's per-sample gradient of its mean log-prob, ``u_i`` (rows, P) in float64, and the row means.

    Rows are independent in the forward pass, so ``chunk`` rows at a time are scored and their gradients taken by
    one batched backward (``torch.func``'s vmap over one cotangent per row): ``rows × chunk`` row-backwards in all.
    """
    params = list(parameters)
    means, grads = [], []
    for start in range(0, len(batch), chunk):
        part = batch[start : start + chunk]
        mask = part.batch["response_mask"].to(torch.float64)  # (chunk, R)
        mean = (log_probs(part).double() * mask).sum(dim=-1) / mask.sum(dim=-1).clamp_min(1.0)  # (chunk,)
        eye = torch.eye(len(mean), dtype=mean.dtype)  # (chunk, chunk): one cotangent per row
        per_row = torch.autograd.grad(mean, params, grad_outputs=eye, is_grads_batched=True)  # each (chunk, *shape)
        grads.append(torch.cat([g.reshape(len(mean), -1).double() for g in per_row], dim=1))  # (chunk, P)
        means.append(mean.detach())
    return torch.cat(means), torch.cat(grads)  # (rows,), (rows, P)


def _step_gradient(
    batch: DataProto, cfg: DictConfig, *, log_prob: torch.Tensor, parameters, dp_size: int
) -> torch.Tensor:
    """∇θ of the loss the optimizer applies for the step at ratio 1: the registry's loss on each micro-batch with
    its mini-batch's ``global_batch_info``, micro-batch losses summed, gradients averaged over the ranks."""
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    loss_fn = get_policy_loss_fn(actor.policy_loss.loss_mode)
    old = log_prob.detach()  # ratio 1: a step's first update
    mask = batch.batch["response_mask"]
    advantages = batch.batch["advantages"]
    raw, _ = analyze_weighting(batch, cfg, modes=[], rollout_levels=(), dp_size=dp_size)  # where each row trains
    layout, total = raw.layout, 0.0
    for micro in np.unique(layout.micro_batch):
        rows = torch.from_numpy(np.flatnonzero(layout.micro_batch == micro))
        mini = torch.from_numpy(layout.mini_batch == layout.mini_batch[rows[0]])
        actor.global_batch_info.update(dp_size=dp_size, batch_num_tokens=int(trainable_tokens(mask[mini]).sum()),
                                       global_batch_size=layout.mini_batch_rows,
                                       loss_scale_factor=actor.loss_scale_factor)  # fmt: skip
        loss, _ = loss_fn(old[rows], log_prob[rows], advantages[rows], mask[rows], actor.loss_agg_mode, actor)
        total = total + loss / dp_size
    grads = torch.autograd.grad(total, list(parameters), retain_graph=True)
    return torch.cat([g.reshape(-1).double() for g in grads])  # (P,)


def _per_rollout(raw, mode: str, level: bool, y: np.ndarray, projections, norm) -> pd.DataFrame:
    """The measured row coefficients summed per rollout, beside the analysis's closed forms."""
    view = raw.view(mode, level)
    codes = raw.layout.rollout
    advantage = raw.advantages[level]  # (rows,) the row's advantage
    with np.errstate(divide="ignore", invalid="ignore"):
        row_weight = np.where(advantage != 0, -y / advantage, np.nan)
    n = raw.rollout_groups.n_groups
    share = np.bincount(codes, weights=y * projections.numpy(), minlength=n) / float(norm)
    return pd.DataFrame(
        {
            "mode": mode,
            "rollout_id": view.rollout_id,
            "rows": view.rows_kept,
            "advantage": view.advantage,
            "closed_form_weight": view.weight,
            "measured_weight": np.bincount(codes, weights=row_weight, minlength=n),
            "closed_form_mass": view.mass,
            "measured_mass": np.bincount(codes, weights=-y, minlength=n),
            "gradient_share": share,
        }
    )


def _with_settings(cfg: DictConfig, mode: str, rollout_level: bool) -> DictConfig:
    return configure(cfg, setting_overrides(rollout_level=rollout_level, mode=mode))
