"""The names of the metrics a step logs, each spelled once: the producers write them, ``curves/`` reads them.

Agent Lightning's names where it has one (``training/*``), verl's (``actor/*``, ``critic/*``), the lab's own
(``lab/*``). A leaf module in ``core/`` with no imports, so that every producer (``core``, ``lab``, ``training``) and
every reader (``curves``, whose plots and tables name them) can import it without loading verl or torch: the import
layers let ``curves/`` import ``core`` but not ``lab`` or ``training``. Metrics written in one place only (the
diagnostics' ``lab/diagnostics/*``, verl's own data metrics) stay with their producer.
"""

from __future__ import annotations

# Agent Lightning's (AGL_FACTS.md): the adapter (core/aggregation.py), the drops (core/update_cap.py), rollout-level
# advantage (core/advantage.py), the step's groups (core/pipeline.py)
N_SAMPLE = "training/n_sample"
N_SAMPLE_DROPPED_SAME_REWARD = "training/n_sample_dropped/same_reward"
N_SAMPLE_DROPPED_RANDOM = "training/n_sample_dropped/random"
N_ROLLOUTS = "training/n_rollouts"
N_SAMPLE_TRAINED = "training/n_sample_trained"
REWARD = "training/reward"
N_UNMERGED_ROLLOUTS = "training/n_unmerged_rollouts"
N_TURNS = "training/n_turns"
N_TRUNCATED_SAMPLE = "training/n_truncated_sample"
N_TRACE_MERGE_MISMATCH_ROWS = "training/n_trace_merge_mismatch_rows"
N_SKIPPED_EMPTY_ROWS = "training/n_skipped_empty_rows"
TRAJECTORY_STORED_ROWS = "training/trajectory/stored_rows"
TRAJECTORY_SEGMENTS_PER_SESSION_MEAN = "training/trajectory/segments_per_session/mean"
TRAJECTORY_LOGICAL_SESSIONS = "training/trajectory/logical_sessions"
ROLLOUT_LEVEL_N_ROWS = "training/rollout_level_advantage/n_rows"
ROLLOUT_LEVEL_N_ROLLOUTS = "training/rollout_level_advantage/n_rollouts"
ROLLOUT_LEVEL_N_MULTI_ROW_ROLLOUTS = "training/rollout_level_advantage/n_multi_row_rollouts"
ROLLOUT_LEVEL_MAX_ROWS_PER_ROLLOUT = "training/rollout_level_advantage/max_rows_per_rollout"
N_ZERO_ADV_GROUPS = "training/n_zero_adv_groups"
N_SAMPLE_DROPPED_MARKED = "training/n_sample_dropped/marked"
N_SAMPLE_COLLECTED = "training/n_sample_collected"
N_ROLLOUTS_W_TRACE = "training/n_rollouts_w_trace"
N_ROLLOUTS_W_REWARD = "training/n_rollouts_w_reward"
N_GROUPS = "training/n_groups"

# the lab's own: the task and rollouts (training/), the loss scale and mass shares (lab/loss_scale.py,
# lab/rollout_mass.py), the trainer
MULTI_ROW_OVERWEIGHT = "lab/multi_row_overweight"
MULTI_ROW_MASS_SHARE = "lab/multi_row_mass_share"
SUCCESS_RATE = "lab/success_rate"
PPO_UPDATES = "lab/ppo_updates"
RESPONSE_LENGTH_FAILED = "lab/response_length_failed"
MULTI_ROW_ROLLOUT_SHARE = "lab/multi_row_rollout_share"
MEAN_TURNS = "lab/mean_turns"
LOSS_SCALE_PER_MINI_BATCH = "lab/loss_scale_per_mini_batch"
LOSS_SCALE = "lab/loss_scale"
NO_GUESS_RATE = "lab/no_guess_rate"
GENERATED_TOKENS = "lab/generated_tokens"
CONTEXT_REWRITES = "lab/context_rewrites"
PARTIALLY_DROPPED_ROLLOUTS = "lab/partially_dropped_rollouts"

# verl's actor update
ACTOR_PPO_KL = "actor/ppo_kl"
ACTOR_PG_CLIPFRAC_LOWER = "actor/pg_clipfrac_lower"
ACTOR_PG_CLIPFRAC = "actor/pg_clipfrac"
ACTOR_LR = "actor/lr"
ACTOR_PG_LOSS = "actor/pg_loss"
ACTOR_GRAD_NORM = "actor/grad_norm"
ACTOR_ENTROPY = "actor/entropy"

# verl's compute_data_metrics and the trainer
CRITIC_SCORE_MEAN = "critic/score/mean"
CRITIC_N_TRANSITION_AFTER_DROPPING = "critic/n_transition_after_dropping"
