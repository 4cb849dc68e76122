"""TrainingPanel: short runs in a background thread, Stop, live curves, the run directory, restore and command."""

import pytest
from omegaconf import OmegaConf

from agl_lab import short_run_config
from agl_lab.config.bases import SHORT_RUN_YAML
from agl_lab.config.doctor import diagnose
from agl_lab.config.settings import DEMO_SETTINGS
from agl_lab.config.task_rows import fitting_limits, row_limit_problem
from agl_lab.curves.style import PALETTE
from agl_lab.ui.run_status import demo_setting_name
from agl_lab.ui.training_panel import TrainingPanel
from conftest import TINY_RUN


@pytest.fixture
def training_panel(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # each run gets a fresh runs/<time>-... folder here
    return TrainingPanel(short_run_config(dotlist=[*TINY_RUN, "trainer.logger=[]"]), redraw_s=0.0)


def test_training_panel_runs_in_a_thread_and_shows_figures_and_the_run_directory(training_panel):
    panel = training_panel
    panel.run_button.click()
    assert panel.running and panel.run_button.disabled and not panel.stop_button.disabled
    result = panel.wait(timeout=120)
    assert not panel.running and panel.error is None
    assert not result.stopped and len(result.history) == 2 and len(panel.history) == 2
    shown = result.run_dir.relative_to(result.run_dir.parents[1])  # runs/<time>-short_run-s0, as the reader knows it
    assert "Run finished" in panel.status.value and f"<code>{shown}</code>" in panel.links.value
    assert shown.parts[0] == "runs" and (result.run_dir / "metrics.jsonl").exists()
    # Agent Lightning's defaults are the demo's both_on: the live curves use its name and colour
    success = [t for t in panel.curves.figure.data if t.name == "both_on (n=1)" and t.xaxis == "x" and t.showlegend]
    assert len(success) == 1 and success[0].line.color == PALETTE[0]
    assert list(success[0].x) == [1.0, 2.0] and len(success[0].y) == 2  # both steps drawn
    assert not panel.run_button.disabled and panel.stop_button.disabled


def test_run_enables_stop_before_it_builds_the_config_and_takes_it_back_when_that_fails(training_panel, monkeypatch):
    panel = training_panel
    seen = []

    def refused():
        seen.append((panel.run_button.disabled, panel.stop_button.disabled))  # what the page shows by then
        raise ValueError("data.max_prompt_length=1 is too short for the task's prompts")

    monkeypatch.setattr(panel, "_config_and_settings", refused)
    with pytest.raises(ValueError, match="max_prompt_length"):
        panel.start()
    assert seen == [(True, False)]  # the click was answered before the ~20 ms of building the run's config
    assert not panel.running and not panel.run_button.disabled and panel.stop_button.disabled


def test_training_panel_applies_its_widgets_to_the_run(training_panel):
    panel = training_panel
    c = panel.controls
    c["rollout_level"].value = False
    c["mode"].value = "token-mean"
    c["max_ppo_update_times"].value = 1
    c["level"].value = "transition"
    c["task_size"].value, c["max_turns"].value, c["rewrite_prob"].value = 3, 2, 0.0
    c["steps"].value, c["seed"].value = 1, 9
    panel.start()
    cfg = panel.wait(timeout=120).config
    assert cfg.algorithm.enable_rollout_level_advantage is False
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "vanilla"
    assert cfg.actor_rollout_ref.actor.loss_agg_mode == "token-mean"
    assert cfg.agentlightning.max_ppo_update_times == 1 and cfg.agentlightning.trace_aggregator.level == "transition"
    assert (cfg.lab.task_size, cfg.lab.max_turns, cfg.lab.rewrite_prob, cfg.lab.seed) == (3, 2, 0.0, 9)
    assert cfg.trainer.total_training_steps == 1 and len(panel.history) == 1
    assert panel.cfg.lab.run_dir is None  # the panel's own config is not tied to one run directory


def test_more_turns_raise_the_row_limits_so_no_row_is_cut(training_panel):
    panel = training_panel
    assert fitting_limits(panel.config()) == {}  # the preset fits its 4 turns: nothing added
    for level in ("trajectory", "transition"):
        panel.controls["level"].value = level
        panel.controls["max_turns"].value = 9
        cfg = panel.config()
        preset = short_run_config(dotlist=[f"agentlightning.trace_aggregator.level={level}", "lab.max_turns=9"])
        raised = fitting_limits(preset)
        assert raised and raised.items() <= panel.settings().items()  # shown in the run's dotlist
        assert row_limit_problem(cfg) is None and [f for f in diagnose(cfg) if f.key == "lab.max_turns"] == []
    panel.controls["steps"].value, panel.controls["rewrite_prob"].value = 1, 0.5
    panel.start()
    assert panel.wait(timeout=120) is not None and panel.error is None
    last = panel.history.iloc[-1]
    assert last["training/n_truncated_sample"] == 0 and last["training/n_sample_dropped/marked"] == 0


def test_stop_ends_the_run_early_and_keeps_what_finished(training_panel):
    panel = training_panel
    panel.controls["steps"].value = 500
    panel.start()
    panel.stop_button.click()
    result = panel.wait(timeout=120)
    assert result.stopped and len(result.history) < 500
    assert "Run stopped" in panel.status.value and (result.run_dir / "policy").exists()


def test_a_refused_config_is_shown_in_red_and_the_panel_stays_usable(training_panel):
    panel = training_panel
    panel.controls["ppo_mini_batch_size"].value = 5  # larger than data.train_batch_size=2: the doctor refuses
    panel.start()
    assert panel.wait(timeout=120) is None
    assert "ppo_mini_batch_size (5) is larger than data.train_batch_size (2)" in panel.error
    assert "Run failed" in panel.status.value and not panel.run_button.disabled


def test_a_run_is_named_after_the_demo_setting_it_matches():
    for name, items in DEMO_SETTINGS.items():
        assert demo_setting_name(short_run_config(dotlist=list(items))) == name
    assert demo_setting_name(short_run_config()) == "both_on"  # Agent Lightning's defaults
    assert demo_setting_name(short_run_config(dotlist=["agentlightning.max_ppo_update_times=3"])) == "this run"


def test_the_curves_settings_are_saved_with_the_run_and_restore_the_panel(training_panel):
    panel = training_panel
    panel.controls["seed"].value, panel.controls["max_turns"].value = 5, 3
    panel.curves.smoothing.value = 0.8
    assert "lab.curve_smoothing=0.8" in panel.curves.copy_command().split()
    panel.start()
    run_dir = panel.wait(timeout=120).run_dir
    saved = (run_dir / "config.yaml").read_text()
    assert "curve_smoothing: 0.8" in saved and "curve_overlay: []" in saved
    fresh = TrainingPanel(short_run_config(dotlist=[*TINY_RUN, "trainer.logger=[]"]), redraw_s=0.0)
    assert fresh.curves.runs.options == (str(run_dir.relative_to(run_dir.parents[1])),)  # the picker found it
    fresh.curves.runs.value = fresh.curves.runs.options
    fresh.curves.restore_button.click()
    assert (fresh.controls["seed"].value, fresh.controls["max_turns"].value) == (5, 3)
    assert fresh.curves.smoothing.value == 0.8 and "restored the settings" in fresh.curves.note.value
    assert fresh.curves.copy_command() == panel.curves.copy_command()  # the same run, the same command


def test_the_panel_shows_the_steps_rollouts_as_they_finish_and_each_steps_transcript(training_panel):
    panel = training_panel
    seen = []
    panel.progress.observe(lambda change: seen.append((panel.progress.description, change["new"])), names="value")
    panel.run_button.click()
    result = panel.wait(timeout=120)
    assert panel.error is None and len(result.history) == 2
    rollouts = 2 * 4  # TINY_RUN: 2 locks x 4 rollouts
    assert panel.progress.max == rollouts and ("step 2", rollouts) in seen and ("step 1", rollouts) in seen
    view = panel.transcripts
    assert [value for _, value in view.step.options] == [1, 2] and view.step.value == 2  # it follows the run
    assert len(view.rollout.options) == rollouts
    first = view.rollout.options[0][1]  # failures first, the most rows first among them
    record = view.steps[-1]["rollouts"]
    assert record[first]["reward"] == min(r["reward"] for r in record)
    assert f"data-rollout='{record[first]['rollout_id']}'" in view.body.value
    view.step.value = 1  # an earlier step's rollouts
    assert view.steps[0]["rollouts"][view.rollout.value]["rollout_id"].startswith("s1/")
    panel.run_button.click()  # a second run in the same panel starts with an empty transcript, then fills it
    assert panel.wait(timeout=120) is not None and panel.error is None
    assert [value for _, value in view.step.options] == [1, 2] and view.step.value == 2


def test_choosing_a_pretrained_model_starts_from_its_preset_and_keeps_the_three_settings(training_panel):
    panel = training_panel
    c = panel.controls
    c["max_ppo_update_times"].value = 2
    c["model"].value = "smollm2-135m-instruct"
    difficulty = OmegaConf.load(SHORT_RUN_YAML.with_name("pretrained_retry_arith.yaml")).lab  # the task's own layer
    chosen = (c["task"].value, c["task_size"].value, c["max_turns"].value)
    assert chosen == ("retry_arith", difficulty.task_size, difficulty.max_turns)
    assert c["steps"].value == 20 and c["max_ppo_update_times"].value == 2
    cfg = panel.config()
    assert (cfg.lab.model, cfg.actor_rollout_ref.model.lora_rank, cfg.data.max_response_length) == (
        "smollm2-135m-instruct", 16, 32)  # fmt: skip
    c["task"].value = "guess_number"  # the task picker alone: its own difficulty is the user's to set here
    assert panel.config().lab.task == "guess_number"
    c["model"].value = "tiny"
    assert (c["task"].value, panel.config().actor_rollout_ref.model.lora_rank) == ("lock", 0)


def test_a_rollouts_transcript_marks_where_a_new_row_starts():
    from agl_lab.ui.transcript_view import rollout_html

    rollout = {
        "rollout_id": "s1/p0/r0", "data_id": "s1/p0", "reward": 0.0,
        "messages": [{"role": "user", "content": "What is 1 + 2?"}, {"role": "assistant", "content": "4"},
                     {"role": "user", "content": "Incorrect, try again."}, {"role": "assistant", "content": "5 <b>"},
                     {"role": "user", "content": "What is 1 + 2? (4, 5) were wrong.", "rewrite": True},
                     {"role": "assistant", "content": "six"}],
        "calls": [0, 0, 1],
        "rows": [{"calls": [0, 1], "response_tokens": 9, "fate": "kept", "advantage": -0.5},
                 {"calls": [2], "response_tokens": 2, "fate": "dropped/random", "advantage": None}],
    }  # fmt: skip
    text = rollout_html(rollout)
    assert text.count("a new row starts here") == 1  # before call 2, after the rewrite
    assert text.index("rewrote the context") < text.index("a new row starts here") < text.index("call 2 · row 1")
    assert "5 &lt;b&gt;" in text  # the model's text is escaped
    assert "<td>dropped/random</td><td>–</td>" in text and "<td>-0.5</td>" in text
