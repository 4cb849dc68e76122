"""See the agent: a run's transcripts (``transcripts.jsonl``, :mod:`agl_lab.training.transcripts`) as text.

Pick a step and one of its rollouts: the conversation reads top to bottom — what the environment said (the question,
its feedback, a context it rewrote) and each of the policy's answers — coloured by the training row each call went
into, with a marker where the trace aggregator started a new row (a rewritten context, or a prompt that did not
continue the last token for token). Below it, one line per row: its calls, trainable tokens, what became of it (kept,
or dropped and why) and its advantage. The rollout list says each rollout's reward and row count, failures first,
so the multi-row rollouts the three settings are about are at hand.
Notebook: ``notebooks/03_short_training_runs.ipynb``.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ipywidgets as w

from agl_lab.files.jsonl import read_jsonl
from agl_lab.training.runs import TRANSCRIPTS_FILE

__all__ = ["TranscriptView", "rollout_html"]

_ROW_COLOURS = ("#e8f0fe", "#fdf0e0", "#e6f4ea", "#f3e8fd", "#fde7e9", "#e0f7fa")


class TranscriptView:
    """A step picker, a rollout picker and the chosen rollout's conversation and rows (module docstring).

    :meth:`load` reads a run directory's ``transcripts.jsonl`` (again: a running run appends to it), :meth:`show_steps`
    takes the records directly. ``widget`` is what a notebook displays.
    """

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self._quiet = False  # True while the pickers' options are replaced (their observers wait)
        narrow = {"description_width": "52px"}
        self.step = w.Dropdown(description="step", options=[], layout=w.Layout(width="170px"), style=narrow)
        self.rollout = w.Dropdown(description="rollout", options=[], layout=w.Layout(width="480px"), style=narrow)
        self.body = w.HTML("<i>No transcript yet: run a step.</i>")
        self.step.observe(lambda _: self._list_rollouts(), names="value")
        self.rollout.observe(lambda _: self._show(), names="value")
        self.widget = w.VBox([w.HTML("<b>Transcripts</b>"), w.HBox([self.step, self.rollout]), self.body])

    def load(self, run_dir: str | Path) -> None:
        """Read ``run_dir``'s transcripts (a run that has not written any shows nothing yet)."""
        path = Path(run_dir) / TRANSCRIPTS_FILE
        self.show_steps(read_jsonl(path) if path.is_file() and path.stat().st_size else [])

    def show_steps(self, steps: list[dict[str, Any]]) -> None:
        """Show these step records; the last step is picked when the picked one was the last (a run that goes on)."""
        following = not self.steps or self.step.value == self.steps[-1]["step"]
        picked = self.step.value
        self.steps = steps
        numbers = [record["step"] for record in steps]
        with self._quietly():  # one redraw below, not one per option and value set
            self.step.options = [(f"step {n}", n) for n in numbers]
            if not numbers:
                self.step.value = None
            else:
                self.step.value = numbers[-1] if following or picked not in numbers else picked
        self._list_rollouts()

    def _list_rollouts(self) -> None:
        if self._quiet:
            return
        record = next((s for s in self.steps if s["step"] == self.step.value), None)
        rollouts = record["rollouts"] if record else []
        order = sorted(range(len(rollouts)), key=lambda k: (rollouts[k]["reward"] or 0.0, -len(rollouts[k]["rows"])))
        with self._quietly():
            self.rollout.options = [(_label(rollouts[k]), k) for k in order]
            self.rollout.value = order[0] if order else None
        self._show()

    @contextlib.contextmanager
    def _quietly(self) -> Iterator[None]:
        """The pickers' observers wait while their options are replaced."""
        self._quiet = True
        try:
            yield
        finally:
            self._quiet = False

    def _show(self) -> None:
        if self._quiet:
            return
        record = next((s for s in self.steps if s["step"] == self.step.value), None)
        if record is None or self.rollout.value is None:
            self.body.value = "<i>No transcript yet: run a step.</i>"
            return
        self.body.value = rollout_html(record["rollouts"][self.rollout.value])


def rollout_html(rollout: dict[str, Any]) -> str:
    """One rollout of a transcript as HTML: its conversation coloured by row, then its rows' table."""
    rows, calls = rollout["rows"], rollout["calls"]
    parts, call, previous_row = [], 0, None
    for message in rollout["messages"]:
        text = html.escape(message["content"]).replace("\n", "<br>")
        if message["role"] == "assistant":
            row = calls[call] if call < len(calls) else None
            if previous_row is not None and row != previous_row:
                parts.append(f"<div class='split' style='{_SPLIT}'>&#9986; a new row starts here</div>")
            colour = _ROW_COLOURS[row % len(_ROW_COLOURS)] if row is not None else "#eeeeee"
            tag = f"row {row}" if row is not None else "row ?"
            parts.append(
                f"<div class='answer' data-row='{row}' style='background:{colour};{_BOX}'><small>call {call} · {tag}"
                f"</small><br>{text}</div>"
            )
            previous_row, call = row, call + 1
        else:
            note = " (the environment rewrote the context)" if message.get("rewrite") else ""
            parts.append(f"<div class='said' style='{_BOX}'><small>environment{note}</small><br>{text}</div>")
    head = "".join(f"<th>{h}</th>" for h in ("row", "calls", "trainable tokens", "fate", "advantage"))
    body = "".join(
        f"<tr style='background:{_ROW_COLOURS[k % len(_ROW_COLOURS)]}'><td>{k}</td>"
        f"<td>{', '.join(map(str, r['calls']))}</td><td>{r['response_tokens']}</td><td>{html.escape(r['fate'])}</td>"
        f"<td>{_advantage(r['advantage'])}</td></tr>"
        for k, r in enumerate(rows)
    )
    title = html.escape(f"{rollout['rollout_id']} (group {rollout['data_id']}): reward {rollout['reward']}, "
                        f"{len(calls)} calls, {len(rows)} rows")  # fmt: skip
    return (
        f"<div class='transcript' data-rollout='{html.escape(rollout['rollout_id'], quote=True)}'><b>{title}</b>"
        f"{''.join(parts)}<table class='transcript-rows' style='font-size:11px'><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table></div>"
    )


def _advantage(value: float | None) -> str:
    return "–" if value is None else f"{value:+.4g}"


def _label(rollout: dict[str, Any]) -> str:
    return (
        f"{rollout['rollout_id']}: reward {rollout['reward']}, {len(rollout['calls'])} calls, "
        f"{len(rollout['rows'])} row{'s' if len(rollout['rows']) != 1 else ''}"
    )


_BOX = "border-radius:4px; padding:3px 6px; margin:3px 0; font-size:12px; white-space:normal"
_SPLIT = "border-top:2px dashed #b00020; color:#b00020; font-size:11px; margin-top:4px"
