"""A run's transcripts.jsonl: each step's rollouts as text, the rows the aggregator made of them (a new row at each
rewritten context), each row's fate and advantage; and the Stop event ends a run between two sampled tokens."""

import json
import threading

import agl_lab
from conftest import TINY_RUN


def transcripts(run_dir):
    return [json.loads(line) for line in (run_dir / "transcripts.jsonl").read_text().splitlines()]


def test_each_step_has_every_rollout_with_its_messages_rows_fates_and_advantages(tmp_path):
    cfg = agl_lab.short_run_config(dotlist=[*TINY_RUN, "lab.rewrite_prob=0.5", f"lab.run_dir={tmp_path / 'run'}"])
    result = agl_lab.train(cfg, progress=False)
    steps = transcripts(result.run_dir)
    assert [s["step"] for s in steps] == [1, 2]
    for step, record in zip(steps, result.history.to_dict("records"), strict=True):
        rollouts = step["rollouts"]
        assert len(rollouts) == record["training/n_rollouts"] == 8
        rows = [row for rollout in rollouts for row in rollout["rows"]]
        assert len(rows) == record["training/n_sample"]
        kept = [row for row in rows if row["fate"] == "kept"]
        assert len(kept) == record["training/n_sample_trained"]
        assert all(row["advantage"] is not None for row in kept)
        assert all(row["advantage"] is None for row in rows if row["fate"] != "kept")
        dropped = {"dropped/same_reward": 0, "dropped/random": 0}
        for row in rows:
            dropped[row["fate"]] = dropped.get(row["fate"], 0) + 1
        assert dropped["dropped/same_reward"] == record["training/n_sample_dropped/same_reward"]
        assert dropped["dropped/random"] == record["training/n_sample_dropped/random"]
        for rollout in rollouts:
            roles = [m["role"] for m in rollout["messages"]]
            assert roles[0] == "user" and roles[1::2] == ["assistant"] * len(rollout["calls"])
            # at the trajectory level a row ends where the environment rewrote the context
            starts = [0] + [k + 1 for k, m in enumerate(m for m in rollout["messages"][2::2]) if m.get("rewrite")]
            assert [row["calls"][0] for row in rollout["rows"]] == starts
            assert rollout["reward"] in (0.0, 1.0)
            # a rollout-level advantage is one number for all of a rollout's kept rows
            advantages = {round(row["advantage"], 6) for row in rollout["rows"] if row["fate"] == "kept"}
            assert len(advantages) <= 1


class StopWhileSampling(threading.Event):
    """A threading.Event (what the training panel's Stop button sets) that, once armed, sets itself on its second look:
    the first is the trainer's check before the next step, the second comes between two of that step's tokens."""

    armed = False

    def is_set(self):
        if self.armed:
            self.looks = getattr(self, "looks", 0) + 1
            if self.looks == 2:
                self.set()
        return super().is_set()


def test_stop_while_sampling_ends_the_run_between_two_tokens_and_drops_that_step(tmp_path):
    dotlist = [*TINY_RUN, "trainer.total_training_steps=3"]
    full = agl_lab.train(agl_lab.short_run_config(dotlist=[*dotlist, f"lab.run_dir={tmp_path / 'full'}"]),
                         progress=False)  # fmt: skip
    event = StopWhileSampling()
    cfg = agl_lab.short_run_config(dotlist=[*dotlist, f"lab.run_dir={tmp_path / 'run'}"])
    result = agl_lab.train(cfg, stop_event=event, on_step=lambda record: setattr(event, "armed", True), progress=False)
    assert event.looks == 2 and result.stopped and list(result.history["step"]) == [1]
    first = [(run / "metrics.jsonl").read_text().splitlines()[0] for run in (result.run_dir, full.run_dir)]
    assert first[0] == first[1]  # step 1 as it would have been
    assert json.loads((result.run_dir / "status.json").read_text())["status"] == "stopped"
    assert len(transcripts(result.run_dir)) == 1 and (result.run_dir / "policy").is_dir()
