"""The benchmarks that drive the package's own objects still drive them: a control renamed in the package fails here,
not months later in ``make bench``. Each runs its real measuring loop at a tiny size (no timing is checked)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import comm
import pytest

from agl_lab.lab.synthetic import SyntheticKnobs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.fixture
def bench_weighting(monkeypatch):
    """benchmarks/bench_weighting.py, its comm stand-in undone after the test (importing it replaces create_comm)."""
    monkeypatch.setattr(comm, "create_comm", comm.create_comm)
    import bench_weighting

    return bench_weighting


def test_the_weighting_benchmark_changes_every_control_it_names(bench_weighting):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        panel = bench_weighting.panel_for("grpo_vectorized", SyntheticKnobs(n_prompts=8, rollouts_per_prompt=4))
    plan = bench_weighting.changes(panel)
    assert set(control for control, _ in plan.values()) <= set(panel.controls), sorted(panel.controls)
    for name, (control, values) in plan.items():
        assert bench_weighting.measure(panel, name, control, values, repeats=1) >= 0
        assert panel.controls[control].value == values[1], name  # each change alternates and ends where it began
    assert bench_weighting.measure_click(panel, repeats=1) >= 0


def test_the_kernel_message_benchmark_sends_what_a_browser_sends_for_every_control(bench_weighting):
    """Each control's change goes as the state key the widget syncs (a dropdown's ``index``), mapping back to the
    value bench_weighting plans for it: a ``value`` sent to a dropdown is ignored and would time a change never made."""
    import bench_kernel_messages

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        panel = bench_weighting.panel_for("grpo_vectorized", SyntheticKnobs(n_prompts=8, rollouts_per_prompt=4))
    keys = set()
    for name, (control, values) in bench_weighting.changes(panel).items():
        widget = panel.controls[control]
        key, sent = bench_kernel_messages.synced(widget, values)
        keys.add(key)
        for state in sent:
            widget.set_state({key: state})  # what the kernel does with the browser's update
            assert widget.value == values[sent.index(state)], name
    assert keys == {"index", "value"}  # both kinds are among the controls


def test_the_figure_drawing_benchmark_draws_each_change_with_live_figures_own_module(bench_weighting):
    """The replay renders both figures with LiveFigure's ES module in Chromium and passes each recorded message to its
    handler: every change that sent one is timed, and the page ends drawing what Python last sent (the shown mode's
    shading, the scatter's markers)."""
    import bench_figure_drawing
    from jupyter_browser import launch_chromium
    from playwright.sync_api import sync_playwright

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        panel = bench_weighting.panel_for("grpo_vectorized", SyntheticKnobs(n_prompts=8, rollouts_per_prompt=4))
    figures = {name: getattr(panel, name).widget._figure for name in bench_figure_drawing.FIGURES}
    first_shade = panel.bars.widget.figure.layout.shapes[0].x0
    # each pair starts at the control's value, so the last change leaves it elsewhere: the state drawn last is new
    pairs = {"mode": (panel.controls["mode"].value, "trl:bnpo"), "seed": (panel.controls["seed"].value, 7)}
    recorded = [bench_figure_drawing.record(panel, control, pair, repeats=1) for control, pair in pairs.items()]
    changes = [messages for _, per_change in recorded for messages in per_change]
    assert all(changes), "each change of the loss mode and the seed sends figure messages"
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": 1440, "height": 1200})
        drawn = bench_figure_drawing.replay(page, panel, figures, changes, quiet_ms=100)
        shade = page.evaluate("() => window.__graphs.bars.layout.shapes[0].x0")
        points = page.evaluate("() => window.__graphs.scatter.querySelectorAll('.scatterlayer .point').length")
        browser.close()
    assert len(drawn) == len(changes) and all(ms > 0 for ms in drawn), drawn
    assert shade == panel.bars.widget.figure.layout.shapes[0].x0 != first_shade
    assert points == sum(len(members) for members in panel.scatter.members) > 0


def test_the_spread_benchmark_refuses_to_add_to_a_missing_file_or_another_torchs_before_any_demo(tmp_path, monkeypatch):
    import bench_numbers

    ran = []
    monkeypatch.setattr(bench_numbers, "_demo", lambda *args: ran.append(args))
    missing = tmp_path / "spread.json"
    monkeypatch.setattr(sys, "argv", ["bench_numbers.py", "--add", "--out", str(missing)])
    with pytest.raises(SystemExit, match=f"--add adds this machine's runs to {missing}, which is not there"):
        bench_numbers.main()
    missing.write_text('{"cpu": "Some Xeon", "torch": "1.0.0+cpu", "kernels": "AVX512", "runs": []}')
    with pytest.raises(SystemExit, match=r"was made with torch 1\.0\.0\+cpu, this is .*: run without --add"):
        bench_numbers.main()
    assert ran == [] and missing.read_text().startswith('{"cpu": "Some Xeon"')  # nothing run, nothing written


def test_the_cpu_accounting_names_each_process_of_a_browser_session_and_counts_its_run_time():
    import subprocess

    from process_cpu import cpu_by_process, role_of, spent_by_role

    chromium = "/usr/lib/chromium/chromium"
    assert role_of(f"{chromium}\0--type=renderer\0--lang=en-US") == "renderer"
    assert role_of(f"{chromium} --type=renderer --lang=en-US\0") == "renderer"  # a child's rewritten title
    assert role_of(f"{chromium}\0--type=gpu-process") == "gpu"
    assert role_of(f"{chromium}\0--type=utility\0--utility-sub-type=network.mojom.NetworkService") == "utility"
    assert role_of(f"{chromium}\0--type=zygote") is None
    assert role_of(f"{chromium}\0--headless\0--no-sandbox") == "browser"
    assert role_of(f"{sys.executable}\0-m\0jupyterlab\0--no-browser") == "server"
    assert role_of(f"{sys.executable}\0-m\0ipykernel_launcher\0-f\0k.json") == "kernel"
    assert role_of(f"{sys.executable}\0-m\0pytest") is None
    # a process named like a kernel spins for 0.3 s of its own CPU between two reads: its count grows by that (counted
    # per process: a kernel of a notebook test ending meanwhile drops out of the role's difference, not below zero)
    spin = (
        "import sys, time\nprint('ready', flush=True)\nsys.stdin.readline()\nend = time.process_time() + 0.3\n"
        "while time.process_time() < end:\n    pass\nprint('spun', flush=True)\nsys.stdin.readline()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", spin, "ipykernel_launcher"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        before = cpu_by_process()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "spun"
        after = cpu_by_process()
    finally:
        child.kill()
        child.wait()
    assert before[child.pid][0] == after[child.pid][0] == "kernel"
    assert after[child.pid][1] - before[child.pid][1] >= 290, (before[child.pid], after[child.pid])
    assert spent_by_role(before, after)["kernel"] >= after[child.pid][1] - before[child.pid][1]
    gone = {pid: entry for pid, entry in after.items() if pid != child.pid}
    assert spent_by_role(after, gone)["kernel"] == 0.0  # a process that ended between two reads is left out


@pytest.mark.xdist_group("real_model")
def test_the_real_model_benchmark_times_a_step_beside_its_floor():
    import re
    import subprocess

    tiny = ["data.train_batch_size=2", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
            "lab.max_turns=2", "data.max_response_length=8"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "bench_real_model.py", "--steps", "1", *tiny],
        cwd=Path(__file__).resolve().parents[1] / "benchmarks", capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    (row,) = [line.split() for line in lines if line.split()[:1] == ["2"]]  # step 2: ours and the floor, part by part
    assert len(row) == 10 and all(float(x) > 0 for x in row[1:])
    assert re.fullmatch(r"real model: step / floor \d+\.\d\dx over 1 steps \(target <= 1\.5x\); peak memory \d+ MiB",
                        lines[-1])  # fmt: skip


@pytest.mark.xdist_group("real_model")
def test_the_roofline_benchmark_prints_the_floor_part_by_part_and_each_variant_beside_it():
    import subprocess

    tiny = ["data.train_batch_size=1", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
            "lab.max_turns=2", "data.max_response_length=4"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "bench_real_model_roofline.py", "--variants", "before,reuse", *tiny],
        cwd=Path(__file__).resolve().parents[1] / "benchmarks", capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    parts = [line.split()[0] for line in lines if line.startswith("  ") and line.split()[0] != "part"]
    assert parts[:3] == ["prefill", "decode", "old"] and "optimizer" in parts
    rows = {line.split()[0]: line.split() for line in lines if line.split()[:1] in (["before"], ["reuse"])}
    assert set(rows) == {"before", "reuse"}
    for row in rows.values():  # gen, old lp, update, step, cpu s, GFLOP/s, GB/s, floor, then the ratio
        assert all(float(x) > 0 for x in row[1:9]) and row[9].endswith("x") and row[-1] == "same"
