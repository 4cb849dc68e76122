"""LiveFigure: the figure a view draws first, one message per update once a view has drawn, the current figure for a
view drawn later, clicks back to Python, and the Python side's own copy of the data."""

import json

import comm
import numpy as np
import plotly.graph_objects as go
import pytest

from agl_lab.ui.live_figure import LiveFigure

SENT: list[dict] = []


class RecordingComm(comm.base_comm.BaseComm):
    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        SENT.append(json.loads(json.dumps(data or {})))


def from_browser(widget, content):
    """A custom message from a view, as ipywidgets hands it to the kernel's widget."""
    widget._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})  # noqa: SLF001


def sent(kind):
    """The custom messages of type ``kind`` sent since the last call, their JSON parsed; clears the record."""
    out = [
        json.loads(m["content"]["json"]) for m in SENT if m.get("method") == "custom" and m["content"]["type"] == kind
    ]
    SENT.clear()
    return out


@pytest.fixture
def live(monkeypatch):
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: RecordingComm(*a, **k))
    figure = go.Figure([go.Scatter(x=np.arange(3.0), y=np.array([1.0, np.nan, 3.0]), name="a"),
                        go.Bar(x=[0, 1], y=[2, 4], name="b", error_y=dict(type="data", array=[0.1, 0.2]))])  # fmt: skip
    figure.update_layout(xaxis_range=[0, 3], width=400)
    SENT.clear()
    return LiveFigure(figure)


def test_the_first_state_carries_plotly_js_and_the_figure_with_its_arrays(live):
    assert live._plotly_js.lstrip().startswith("/**") and "window.Plotly = Plotly" in live._plotly_js
    first = json.loads(live._figure)
    assert [t["name"] for t in first["data"]] == ["a", "b"] and first["layout"]["width"] == 400
    data = live.figure.data  # numpy again on the Python side (to_plotly_json made them base64 specs)
    np.testing.assert_array_equal(data[0].x, [0.0, 1.0, 2.0])
    assert np.isnan(data[0].y[1])


def test_before_a_view_has_drawn_an_update_changes_the_figure_it_will_draw(live):
    live.update({0: {"y": np.array([5.0, 6.0, 7.0])}}, {"yaxis.range": [0, 8]})
    assert sent("update") == []
    first = json.loads(live._figure)
    assert first["data"][0]["y"] == [5.0, 6.0, 7.0] and first["layout"]["yaxis"]["range"] == [0, 8]


def test_after_a_view_has_drawn_an_update_is_one_message_of_what_changed(live):
    from_browser(live, {"type": "shown"})
    figure_before = live._figure
    SENT.clear()
    live.update({1: {"y": np.array([3, 1]), "error_y.array": np.array([0.5, np.nan])}}, {"xaxis.range": [-1, 2]})
    (update,) = sent("update")
    assert update == {"traces": [1], "data": [{"y": [3, 1], "error_y.array": [0.5, None]}],
                      "layout": {"xaxis.range": [-1, 2]}, "frame": True}  # fmt: skip
    assert live._figure == figure_before  # the full figure is not sent again
    bar = live.figure.data[1]  # the Python side keeps what was sent, dotted paths nested
    np.testing.assert_array_equal(bar.y, [3, 1])
    assert bar.error_y.array[0] == 0.5 and live.figure.layout.xaxis.range == (-1, 2)


def test_layout_keys_at_their_current_value_are_left_out_and_no_change_sends_nothing(live):
    # plotly redraws every axis an update names, at its old range too: only what changed goes
    from_browser(live, {"type": "shown"})
    live.update(layout={"xaxis.range": [0, 3], "yaxis.range": [0, 8], "xaxis.ticktext": ["a", "b"]})
    (first,) = sent("update")
    assert first["layout"] == {"yaxis.range": [0, 8], "xaxis.ticktext": ["a", "b"]}  # the x range was [0, 3]
    SENT.clear()
    live.update(layout={"xaxis.range": np.array([0.0, 3.0]), "yaxis.range": [0, 8], "xaxis.ticktext": ["a", "b"]})
    assert sent("update") == []
    live.update({0: {"y": [1.0, 2.0, 3.0]}}, {"yaxis.range": [0, 9], "xaxis.ticktext": ["a", "c"]})
    (update,) = sent("update")
    assert update["traces"] == [0] and update["layout"] == {"yaxis.range": [0, 9], "xaxis.ticktext": ["a", "c"]}
    SENT.clear()
    live.update(layout={"yaxis.range": [np.nan, 9]})  # NaN never counts as unchanged
    live.update(layout={"yaxis.range": [np.nan, 9]})
    assert len(sent("update")) == 2
    assert live.layout_value("xaxis.range") == [0, 3] and live.layout_value("xaxis.ticktext") == ["a", "c"]
    assert live.layout_value("yaxis2.range") is None and live.layout_value("xaxis.range.0.x") is None  # not set


def test_trace_values_at_their_current_value_are_left_out(live):
    # only what changed is sent (the page names every trace in its frame): a trace whose values all stay is not sent,
    # nor is a value that stays beside one that changes (NaN where NaN was stays: an empty bar is not drawn either way)
    from_browser(live, {"type": "shown"})
    live.update({0: {"y": np.array([1.0, np.nan, 3.0])}, 1: {"y": [2, 4], "error_y.array": np.array([0.1, 0.25])}})
    (update,) = sent("update")
    assert update["traces"] == [1] and update["data"] == [{"error_y.array": [0.1, 0.25]}]
    live.update({0: {"y": np.array([1.0, np.nan, 3.0]), "x": np.arange(3.0)}, 1: {"error_y.array": [0.1, 0.25]}})
    assert sent("update") == []  # nothing changed: nothing sent
    live.update({0: {"y": np.array([1.0, 2.0, 3.0])}, 1: {"name": "b"}}, frame=False)
    (update,) = sent("update")
    assert update["traces"] == [0] and update["data"] == [{"y": [1.0, 2.0, 3.0]}] and not update["frame"]
    y = np.array([1.0, 2.0])
    live.update({0: {"y": y}})  # fewer points: a change
    assert sent("update")[0]["data"] == [{"y": [1.0, 2.0]}]
    y[0] = 5.0  # the caller's array changed in place and sent again: compared with what was sent, not with itself
    live.update({0: {"y": y}})
    assert sent("update")[0]["data"] == [{"y": [5.0, 2.0]}]
    np.testing.assert_array_equal(live.figure.data[0].y, [5.0, 2.0])


def test_a_view_drawn_later_gets_the_current_figure(live):
    from_browser(live, {"type": "shown"})
    live.update({0: {"y": [9.0, 9.0, 9.0]}})
    SENT.clear()
    from_browser(live, {"type": "shown"})  # a second display, or the page reloaded: it drew the first state
    (figure,) = sent("figure")
    assert figure["data"][0]["y"] == [9.0, 9.0, 9.0]


def test_a_click_calls_back_with_the_trace_and_the_point(live):
    clicks = []
    live.on_click(lambda trace, point: clicks.append((trace, point)))
    from_browser(live, {"type": "click", "trace": 1, "point": 0})
    assert clicks == [(1, 0)]


def test_panels_freeze_what_is_loaded_once_per_process():
    import gc

    from agl_lab.ui.gc_pauses import freeze_loaded

    freeze_loaded.cache_clear()  # as in a fresh kernel
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    freeze_loaded()
    frozen = gc.get_freeze_count()
    assert frozen > 10_000  # the imports: torch, verl, plotly, the lab
    garbage = [[] for _ in range(1000)]  # objects made after it stay scannable
    freeze_loaded()
    # not frozen again: that would add the 1,000 lists. A frozen object freed meanwhile (another thread of the
    # process letting go of one) lowers the count, so it may fall by a few (seen: 2, with 3 xdist workers)
    assert gc.get_freeze_count() <= frozen < gc.get_freeze_count() + len(garbage)


def test_a_full_redraw_says_so_and_replace_sends_the_whole_new_figure(live):
    from_browser(live, {"type": "shown"})
    SENT.clear()
    live.update({0: {"y": [1.0, 2.0, 3.0]}}, frame=False)  # curves whose axes follow their data
    (update,) = sent("update")
    assert update["frame"] is False and update["traces"] == [0]
    live.replace(go.Figure([go.Scatter(x=[1, 2], y=[3, 4], name="c")]))
    (figure,) = sent("figure")
    assert [t["name"] for t in figure["data"]] == ["c"] and [t.name for t in live.figure.data] == ["c"]
