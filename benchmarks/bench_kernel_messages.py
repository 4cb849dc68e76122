"""Notebook 01's controls through a real kernel, no browser: from a widget's comm message to the kernel's idle.

``bench_browser.py`` times a change from the page's change event to the redrawn figure, and its ``--events`` say
when the page saw the kernel busy and idle; ``bench_weighting.py`` times the panel's Python alone. This one is the
part between them: a real ipykernel started with jupyter_client builds notebook 01's panel at the size
``bench_browser.py`` drives it (900 prompts × 8 rollouts, ~10,000 rows; notebook 01 itself opens with 32 prompts:
``--prompts 32``), its figures told a view has drawn them (so updates go as messages), and each control then gets the
``comm_msg`` a browser sends when the control changes, alternating between two values. Timed on the client: the
message sent → the kernel's ``busy`` → its ``idle``, with the IOPub messages and bytes the change sent back.

On the 2-core AMD EPYC (2026-12-04), with two busy processes beside it: at 900 prompts a median of 53.6 ms (slowest
85 ms; 5–7 messages, 26–73 kB each change) at a load of 1.7–1.9; the browser, at the same size and load, takes a
median of 157 ms to the redrawn figure. At 32 prompts the kernel answers in 9.7 ms (slowest 19 ms). So at ~10k rows
the kernel's part is about a third of a browser change under load; the rest is the Jupyter server's relay and the
page's own main thread. (An earlier version of this benchmark compared its 32 prompts with the browser's 900 and
concluded that the kernel's part was negligible: it is not.)

Run: ``.venv/bin/python benchmarks/bench_kernel_messages.py [--prompts 900] [--repeats 5] [--load N]``.
"""

from __future__ import annotations

import argparse
import json
import queue
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from busy_load import busy_processes, load_now  # noqa: E402

SETUP = """
import json, warnings
warnings.simplefilter("ignore")
import comm
import agl_lab
from agl_lab.lab.synthetic import SyntheticKnobs
from agl_lab.ui.weighting_panel import WeightingPanel
kernels_comm = comm.create_comm
from bench_weighting import changes  # its import puts a stand-in comm in place: the kernel's own comes back
comm.create_comm = kernels_comm
panel = WeightingPanel(knobs=SyntheticKnobs(n_prompts={prompts}, rollouts_per_prompt=8, seed=0))
for figure in (panel.bars.widget, panel.scatter.widget):  # as when a view has drawn them: updates are messages
    figure._handle_msg({{"content": {{"data": {{"method": "custom", "content": {{"type": "shown"}}}}}}, "buffers": []}})
from bench_kernel_messages import synced
plan = {{name: (panel.controls[c].comm.comm_id, *synced(panel.controls[c], v))
        for name, (c, v) in changes(panel).items() if "first time" not in name}}
print(json.dumps(plan))
"""


def synced(widget, values) -> tuple[str, list]:
    """What a browser sends for ``widget`` to take each of ``values``: a selection widget (a dropdown, toggle buttons)
    syncs its ``index`` into its options, any other widget its ``value``."""
    if hasattr(widget, "index"):
        return "index", [list(widget._options_values).index(value) for value in values]
    return "value", list(values)


def change(kc, comm_id: str, key: str, value) -> tuple[float, float, int, int]:
    """One control change as a browser sends it: (ms to busy, ms to idle, IOPub messages, their bytes)."""
    while True:  # nothing left over from the last change
        try:
            kc.get_iopub_msg(timeout=0.01)
        except queue.Empty:
            break
    content = {"comm_id": comm_id, "data": {"method": "update", "state": {key: value}, "buffer_paths": []}}
    msg = kc.session.msg("comm_msg", content)
    start = time.perf_counter()
    kc.shell_channel.send(msg)
    busy, count, size = float("nan"), 0, 0
    while True:
        reply = kc.get_iopub_msg(timeout=60)
        if reply["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
            continue
        count += 1
        size += len(json.dumps(reply["content"], default=str)) + sum(len(b) for b in reply.get("buffers", []))
        if reply["msg_type"] == "status" and reply["content"]["execution_state"] == "busy":
            busy = time.perf_counter() - start
        elif reply["msg_type"] == "status":
            return busy * 1e3, (time.perf_counter() - start) * 1e3, count, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=900, help="prompts (bench_browser: 900; notebook 01: 32)")
    parser.add_argument("--repeats", type=int, default=5, help="changes per control (each a real change)")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the measurement")
    args = parser.parse_args()
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(Path(__file__).resolve().parent))
    try:
        printed = []
        reply = kc.execute_interactive(SETUP.format(prompts=args.prompts), timeout=600, output_hook=printed.append)
        if reply["content"]["status"] != "ok":
            raise SystemExit(f"the panel did not build in the kernel: {reply['content'].get('evalue')}")
        text = "".join(m["content"]["text"] for m in printed if m["content"].get("name") == "stdout")
        plan = json.loads(text.strip().splitlines()[-1])
        with busy_processes(args.load):
            print(f"{args.prompts} prompts × 8 rollouts, {args.repeats} changes per control, {args.load} busy")
            print(f"{'control':<40} {'busy':>6} {'idle':>6} {'max':>6} {'msgs':>5} {'kB':>7} {'load':>5}  "
                  "(ms from the message)")  # fmt: skip
            idles = []
            for name, (comm_id, key, values) in plan.items():
                change(kc, comm_id, key, values[0])  # a warm-up pair
                change(kc, comm_id, key, values[1])
                samples = [change(kc, comm_id, key, values[i % 2]) for i in range(2 * args.repeats)]
                idle = [s[1] for s in samples]
                idles += idle
                print(f"{name:<40} {statistics.median(s[0] for s in samples):6.1f} {statistics.median(idle):6.1f} "
                      f"{max(idle):6.1f} {samples[0][2]:5d} {samples[0][3] / 1e3:7.1f} {load_now():5.1f}")  # fmt: skip
        print(f"kernel messages: median {statistics.median(idles):.1f} ms, slowest {max(idles):.1f} ms from a "
              f"control's comm message to the kernel's idle over {len(idles)} changes, no browser, at a load of "
              f"{load_now():.1f}")  # fmt: skip
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


if __name__ == "__main__":
    main()
