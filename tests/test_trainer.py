"""Short real runs of the lab trainer: every setting combination at both aggregation levels, with tiny sizes."""

import json
import warnings

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM
from verl.trainer.ppo import core_algos

import agl_lab
from agl_lab import ConfigError, EmptyBatchWarning, short_run_config, train
from agl_lab.config.compose import compose_config
from agl_lab.training.policy import build_policy
from agl_lab.training.tasks import make_task
from conftest import TINY_RUN

# conftest.TINY_RUN: 8 rollouts per step, mini-batches of 4 rows; more rewrites so rollouts split often
TINY = (*TINY_RUN, "lab.max_turns=3", "lab.rewrite_prob=0.5", "trainer.logger=[]")
MINI_ROWS = 4
ADAPTER = (
    "training/reward",
    "training/n_sample",
    "training/n_rollouts",
    "training/n_turns",
    "training/n_truncated_sample",
)
DROPS = (
    "training/n_sample_collected",
    "training/n_sample_dropped/marked",
    "training/n_sample_dropped/same_reward",
    "training/n_sample_dropped/random",
    "training/n_sample_trained",
)
ACTOR = ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower", "actor/grad_norm", "actor/lr")
VERL_DATA = ("critic/score/mean", "critic/advantages/mean", "response_length/mean", "prompt_length/mean")
LAB = (
    "lab/success_rate",
    "lab/mean_turns",
    "lab/no_guess_rate",
    "lab/context_rewrites",
    "lab/generated_tokens",
    "lab/loss_scale",
    "lab/loss_scale_per_mini_batch",
    "lab/multi_row_rollout_share",
    "lab/multi_row_mass_share",
    "lab/multi_row_overweight",
)
ROLLOUT_LEVEL = (
    "training/rollout_level_advantage/n_rows",
    "training/rollout_level_advantage/n_rollouts",
    "training/rollout_level_advantage/n_multi_row_rollouts",
    "training/rollout_level_advantage/max_rows_per_rollout",
)


def tiny_cfg(tmp_path, *dotlist, name="run"):
    return short_run_config(dotlist=[*TINY, f"lab.run_dir={tmp_path / name}", *dotlist])


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("level", ["trajectory", "transition"])
@pytest.mark.parametrize("cap", ["null", "1"])
@pytest.mark.parametrize(
    ("rollout_level", "loss_mode"),
    [(True, "per_rollout_mean"), (False, "vanilla"), (True, "vanilla"), (False, "per_rollout_mean")],
)
def test_every_setting_combination_trains_and_logs_agent_lightnings_metrics(
    tmp_path, level, cap, rollout_level, loss_mode
):
    cfg = tiny_cfg(
        tmp_path,
        f"algorithm.enable_rollout_level_advantage={str(rollout_level).lower()}",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}",
        f"agentlightning.max_ppo_update_times={cap}",
        f"agentlightning.trace_aggregator.level={level}",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the doctor's half-pair warning is not the point here
        result = train(cfg, progress=False)
    assert not result.stopped and list(result.history["step"]) == [1, 2]
    records = lines(result.run_dir / "metrics.jsonl")
    # a metric a step could not measure (the response length of failed rollouts where none failed) is absent from
    # its line and NaN in the history's column
    assert records == [{k: v for k, v in r.items() if not pd.isna(v)} for r in result.history.to_dict("records")]
    for record in records:
        expected = {*ADAPTER, *DROPS, *ACTOR, *VERL_DATA, *LAB, "actor/entropy"}
        expected |= set(ROLLOUT_LEVEL) if rollout_level else set()
        if level == "trajectory":
            expected |= {"training/n_unmerged_rollouts", "training/n_trace_merge_mismatch_rows"}
        assert expected <= set(record), expected - set(record)
        assert not any(key.startswith(("timing_s/", "perf/")) for key in record)  # wall clock stays out
        if not rollout_level:
            assert not set(ROLLOUT_LEVEL) & set(record)

        collected = record["training/n_sample_collected"]
        dropped = sum(record[f"training/n_sample_dropped/{c}"] for c in ("marked", "same_reward", "random"))
        trained = record["training/n_sample_trained"]
        assert trained + dropped == collected == record["training/n_sample"]
        assert trained > 0 and trained % MINI_ROWS == 0
        if cap != "null":
            assert trained <= int(cap) * MINI_ROWS
        assert record["training/n_sample"] >= record["training/n_rollouts"] == 8
        if level == "transition":
            assert record["training/n_sample"] == record["training/n_turns"]
        if rollout_level:
            assert record["training/rollout_level_advantage/n_rows"] == trained
            assert (
                record["training/rollout_level_advantage/n_rows"]
                >= record["training/rollout_level_advantage/n_rollouts"]
            )
            if loss_mode == "per_rollout_mean":  # v1.0 divisor: the step's total weight is n_rollouts / n_rows
                ratio = record["training/rollout_level_advantage/n_rollouts"] / trained
                assert record["lab/loss_scale"] == pytest.approx(ratio)
        if loss_mode == "vanilla":  # token-mean: each mini-batch's weights sum to 1
            assert record["lab/loss_scale"] == pytest.approx(trained // MINI_ROWS)
            assert record["lab/loss_scale_per_mini_batch"] == pytest.approx(1.0)
        # per mini-batch: the step's total shared by its trained mini-batches
        assert record["lab/loss_scale_per_mini_batch"] == pytest.approx(
            record["lab/loss_scale"] / (trained // MINI_ROWS)
        )
    timings = lines(result.run_dir / "timings.jsonl")
    assert [t["step"] for t in timings] == [1, 2] and all(t["timing_s/step"] > 0 for t in timings)
    assert (result.run_dir / "config.yaml").exists()
    assert result.config.actor_rollout_ref.actor.policy_loss.loss_mode == loss_mode


@pytest.mark.parametrize(
    ("loss_mode", "scale"),
    [
        ("sapo", lambda trained: trained // MINI_ROWS),  # forces seq-mean-token-mean: each mini-batch's rows sum to 1
        ("geo_mean", lambda trained: trained // 2),  # a mean over each micro-batch of 2 rows: 1 per micro-batch
        ("gspo", lambda trained: trained // MINI_ROWS),  # through agg_loss with loss_agg_mode (token-mean)
    ],
)
def test_the_loss_scale_of_losses_that_aggregate_their_own_way(tmp_path, loss_mode, scale):
    cfg = tiny_cfg(tmp_path, f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}",
                   "algorithm.enable_rollout_level_advantage=false")  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the doctor notes a loss outside Agent Lightning's pair
        result = train(cfg, progress=False)
    for record in lines(result.run_dir / "metrics.jsonl"):
        assert record["lab/loss_scale"] == pytest.approx(scale(record["training/n_sample_trained"]), rel=1e-6)


def test_the_update_changes_the_policy_and_the_checkpoint_reloads(tmp_path):
    cfg = tiny_cfg(tmp_path)
    result = train(cfg, progress=False)
    initial = build_policy(cfg, words=make_task("lock", size=4, max_turns=4, rewrite_prob=0.3, seed=0).words()).model
    trained = AutoModelForCausalLM.from_pretrained(result.run_dir / "policy")
    assert not torch.equal(initial.model.embed_tokens.weight, trained.model.embed_tokens.weight)
    again = agl_lab.compose_config(dotlist=[f"lab.model_path={result.run_dir / 'policy'}"])
    assert build_policy(again, words=[]).source == str(result.run_dir / "policy")


def test_kl_loss_entropy_bonus_epochs_and_shuffle_use_verls_terms(tmp_path):
    cfg = tiny_cfg(
        tmp_path,
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.1",
        "actor_rollout_ref.actor.ppo_epochs=2",
        "actor_rollout_ref.actor.shuffle=true",
        "lab.per_rollout_divisor=rollouts",
    )
    # entropy_coeff=1, not 0.01: verl's YAML default is the int 0, so agl_lab's type check refuses a float there
    cfg.actor_rollout_ref.actor.entropy_coeff = 1
    record = train(cfg, progress=False).history.iloc[-1]
    assert record["actor/kl_coef"] == pytest.approx(0.1)
    assert record["actor/kl_loss"] >= 0  # low_var_kl against the initial policy
    assert "actor/entropy_loss" in record and record["actor/entropy_loss"] > 0


def test_the_policy_loss_comes_from_verls_registry_by_loss_mode(tmp_path, monkeypatch):
    calls = []

    def spy_loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        loss_agg_mode="token-mean",
        config=None,
        rollout_is_weights=None,
    ):
        calls.append((tuple(log_prob.shape), loss_agg_mode, config.global_batch_info["global_batch_size"]))
        return (log_prob * response_mask).sum() * 0.0, {"actor/pg_clipfrac": 0.0}

    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "lab_spy", spy_loss)
    cfg = tiny_cfg(
        tmp_path, "actor_rollout_ref.actor.policy_loss.loss_mode=lab_spy", "agentlightning.max_ppo_update_times=1"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        train(cfg, progress=False)
    # the start-up gate calls it once on one token (what verl's losses refuse is asked before anything runs); then
    # one mini-batch of 4 rows per step (cap 1), in micro-batches of 2 rows: 2 calls per step
    gate, *updates = calls
    assert gate[0] == (1, 1) and len(updates) == 4
    assert all(shape[0] == 2 and size == MINI_ROWS for shape, _, size in updates)


def test_same_seed_same_metrics_jsonl_and_another_seed_differs(tmp_path):
    runs = [
        train(tiny_cfg(tmp_path, f"lab.seed={seed}", name=f"r{i}"), progress=False) for i, seed in enumerate((3, 3, 4))
    ]
    texts = [(r.run_dir / "metrics.jsonl").read_text() for r in runs]
    assert texts[0] == texts[1] and texts[0] != texts[2]


def test_stop_event_ends_the_run_cleanly_keeping_the_files(tmp_path, finished):
    import threading

    stop = threading.Event()
    cfg = tiny_cfg(tmp_path, "trainer.total_training_steps=5", "trainer.logger=[console]")
    result = train(cfg, stop_event=stop, on_step=lambda record: stop.set(), progress=False)
    assert result.stopped and list(result.history["step"]) == [1]
    assert len(lines(result.run_dir / "metrics.jsonl")) == 1
    assert (result.run_dir / "policy" / "config.json").exists() and (result.run_dir / "config.yaml").exists()
    assert finished == [1]  # the tracker was closed once, with a non-zero exit code


def test_ctrl_c_during_a_run_keeps_the_finished_steps(tmp_path, finished):

    def interrupt(record):
        if record["step"] == 2:
            raise KeyboardInterrupt

    cfg = tiny_cfg(tmp_path, "trainer.total_training_steps=5", "trainer.logger=[console]")
    result = train(cfg, on_step=interrupt, progress=False)
    assert result.stopped and list(result.history["step"]) == [1, 2]
    assert [r["step"] for r in lines(result.run_dir / "metrics.jsonl")] == [1, 2]
    assert (result.run_dir / "policy" / "model.safetensors").exists()
    assert finished == [130]  # the trackers record a stop by Ctrl-C as the shell would: 128 + SIGINT


def test_a_step_with_nothing_left_after_the_drops_is_skipped_with_a_warning(tmp_path):
    # transition rows whose prompts exceed data.max_prompt_length are all marked is_drop_mask
    cfg = tiny_cfg(tmp_path, "agentlightning.trace_aggregator.level=transition", "data.max_prompt_length=2")
    with pytest.warns(EmptyBatchWarning, match="skipping this training step"):
        result = train(cfg, progress=False)
    assert not result.stopped and len(result.history) == 2
    for record in result.history.to_dict("records"):
        assert record["training/n_sample_dropped/marked"] == record["training/n_sample_collected"] > 0
        assert record["training/n_sample_trained"] == 0
        assert not any(key.startswith("actor/") and record[key] == record[key] for key in record)  # absent (NaN)


def test_short_run_config_layers_overrides_and_dotlist_on_the_short_run_sizes():
    cfg = short_run_config()
    assert cfg.data.train_batch_size == 8 and cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.trainer.total_training_steps == 40 and cfg.algorithm.adv_estimator == "grpo"
    assert cfg.actor_rollout_ref.rollout.response_length == cfg.data.max_response_length == 4
    # the three settings stay Agent Lightning's defaults
    assert cfg.algorithm.enable_rollout_level_advantage is True
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "per_rollout_mean"
    assert cfg.agentlightning.max_ppo_update_times is None
    layered = short_run_config(
        overrides={"data": {"train_batch_size": 3}, "trainer.total_training_steps": 7},
        dotlist=["data.train_batch_size=5"],
    )
    assert layered.data.train_batch_size == 5 and layered.trainer.total_training_steps == 7
    assert layered.data.max_response_length == 4  # untouched short-run value kept


@pytest.mark.parametrize(
    ("dotlist", "message"),
    [
        (["trainer.total_training_steps=null"], "trainer.total_training_steps: must be a positive integer for a short"),
        (
            ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null"],
            "ppo_micro_batch_size_per_gpu: verl's actor config refuses it: .*Please set at least one of",
        ),
        (["algorithm.adv_estimator=remax"], "REMAX baseline not yet supported in AgentLightningRayPPOTrainer"),
        (["actor_rollout_ref.rollout.temperature=0.0"], r"temperature: must be a number > 0, got 0.0"),
        (["lab.max_turns=0"], r"lab.max_turns: must be in \[1, 64\], got 0"),
        (["lab.cpu_threads=-1"], r"lab.cpu_threads: must be in \[0, 1024\], got -1"),
    ],
)
def test_config_errors_stop_the_run_before_anything_is_written(tmp_path, dotlist, message):
    cfg = tiny_cfg(tmp_path, *dotlist)
    with pytest.raises(ConfigError, match=message):
        train(cfg, progress=False)
    assert not (tmp_path / "run").exists()


def test_verls_default_sizes_are_refused_with_a_pointer_to_short_run_config(tmp_path):
    cfg = compose_config(
        dotlist=["algorithm.adv_estimator=grpo", "trainer.total_training_steps=2", f"lab.run_dir={tmp_path / 'run'}"]
    )
    with pytest.raises(ConfigError, match="agl_lab.short_run_config sizes the batch"):
        train(cfg, progress=False)


def test_a_run_dir_that_holds_a_run_is_refused_and_a_fresh_one_is_made_by_default(tmp_path, monkeypatch):
    first = train(tiny_cfg(tmp_path, "trainer.total_training_steps=1"), progress=False)
    with pytest.raises(FileExistsError, match="already holds a run"):
        train(tiny_cfg(tmp_path, "trainer.total_training_steps=1"), progress=False)
    assert len(lines(first.run_dir / "metrics.jsonl")) == 1
    monkeypatch.chdir(tmp_path)
    fresh = [train(short_run_config(dotlist=[*TINY, "trainer.total_training_steps=1"]), progress=False) for _ in (0, 1)]
    assert fresh[0].run_dir != fresh[1].run_dir
    assert all(
        r.run_dir.parent == tmp_path / "runs"
        and r.run_dir.name.endswith("short_run-s0")
        or r.run_dir.name.endswith("short_run-s0-2")
        for r in fresh
    )


def test_the_run_uses_lab_cpu_threads_and_restores_torchs_setting(tmp_path):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen = []
        cfg = tiny_cfg(tmp_path, "lab.cpu_threads=1")
        train(cfg, on_step=lambda record: seen.append(torch.get_num_threads()), progress=False)
        assert seen == [1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_cispo_per_rollout_mean_trains_with_normalized_advantages(tmp_path):
    # Agent Lightning 1.0.2's CISPO variant: the loss from verl's registry, the advantages normalized by rollout
    cfg = tiny_cfg(tmp_path, "actor_rollout_ref.actor.policy_loss.loss_mode=cispo_per_rollout_mean")
    result = train(cfg, progress=False)
    assert list(result.history["step"]) == [1, 2]
    for record in lines(result.run_dir / "metrics.jsonl"):
        assert record["actor/pg_clipfrac_lower"] == 0.0  # no dual clip
        assert record["critic/n_transition_after_dropping"] == record["training/n_sample_trained"]
        # per_rollout_mean ÷ rows at ratio 1: the step's total weight is n_rollouts / n_rows
        n_rows = record["training/rollout_level_advantage/n_rows"]
        assert record["lab/loss_scale"] == pytest.approx(record["training/rollout_level_advantage/n_rollouts"] / n_rows)


def test_whole_rollout_drops_train_whole_rollouts_in_a_short_last_mini_batch(tmp_path):
    # mini-batches of 3 rows (8 rollouts a step that often split): the surplus beyond whole mini-batches is dropped as
    # whole rollouts, so a step may train a row count that is not a multiple of 3, its last update on fewer rows
    cfg = tiny_cfg(
        tmp_path,
        "lab.cap_drop_unit=rollout",
        "actor_rollout_ref.rollout.n=3",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
        "trainer.total_training_steps=4",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = train(cfg, progress=False)
    history = result.history
    trained, collected = history["training/n_sample_trained"], history["training/n_sample_collected"]
    assert (trained > 0).all() and (trained <= collected // 3 * 3).all()
    assert (history["lab/partially_dropped_rollouts"] == 0).all()
    assert (history["lab/ppo_updates"] == -(-trained // 3)).all()  # ceil: a short last mini-batch is one update
    assert (trained % 3 != 0).any()  # this seed's run has such a step (13 rows collected, 11 trained: 3 + 3 + 3 + 2)
    assert history["actor/pg_loss"].notna().all()
