"""Every dotted name agl_lab reads or writes, spelled once: the config keys it reads and the metric names a step
logs. The rest of the package imports these names.

The keys are verl's and Agent Lightning's own (``algorithm.*``, ``actor_rollout_ref.*``, ``data.*``, ``trainer.*``,
``agentlightning.*``; ``config/conf/agl_trainer.yaml``) plus ``lab:`` (:class:`agl_lab.config.lab_config.LabConfig`).
The module sits in ``core/``, the lowest layer, so that the pipeline's messages, the config's tables (types,
ranges, the doctor), the panels and the CLI all name a key through the same constant; a renamed key is one edit.
What a key's values may be lives in :data:`agl_lab.config.constraints.CONSTRAINTS` (ranges) and
:mod:`agl_lab.config.key_types` (types), never here.

Metric names: Agent Lightning's where it has one (``training/*``), verl's (``actor/*``, ``critic/*``), the lab's own
(``lab/*``). The producers (``core``, ``lab``, ``training``) write them and ``curves/`` reads them; a leaf module
with no imports, so that the readers of a run's metrics load neither verl nor torch, and a walk from a setting's key
to where it acts and to its plot names one module for both. Metrics written in one place only (the diagnostics'
``lab/diagnostics/*``, verl's own data metrics) stay with their producer.
"""

from __future__ import annotations

# ---- sections --------------------------------------------------------------------------------------------------
ALGORITHM = "algorithm"
ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
AGGREGATOR = "agentlightning.trace_aggregator"
LAB = "lab"
DATA = "data"

# ---- the three settings and the lab's divisor ------------------------------------------------------------------
ROLLOUT_LEVEL = "algorithm.enable_rollout_level_advantage"
LOSS_MODE = f"{ACTOR}.policy_loss.loss_mode"  # verl's policy-loss key (a catalogue normalization sets it)
MAX_PPO_UPDATE_TIMES = "agentlightning.max_ppo_update_times"
DIVISOR = f"{LAB}.per_rollout_divisor"

# ---- algorithm -------------------------------------------------------------------------------------------------
ESTIMATOR = "algorithm.adv_estimator"
NORM_ADV_BY_STD = "algorithm.norm_adv_by_std_in_grpo"
GAMMA = "algorithm.gamma"
LAM = "algorithm.lam"
USE_KL_IN_REWARD = "algorithm.use_kl_in_reward"
KL_PENALTY = "algorithm.kl_penalty"
KL_CTRL = "algorithm.kl_ctrl"
KL_COEF = f"{KL_CTRL}.kl_coef"
GDPO_REWARD_KEYS = "algorithm.gdpo_reward_keys"

# ---- actor_rollout_ref -----------------------------------------------------------------------------------------
LOSS_AGG_MODE = f"{ACTOR}.loss_agg_mode"
MINI_BATCH = f"{ACTOR}.ppo_mini_batch_size"
MICRO_BATCH = f"{ACTOR}.ppo_micro_batch_size_per_gpu"
MICRO_BATCH_GLOBAL = f"{ACTOR}.ppo_micro_batch_size"
PPO_EPOCHS = f"{ACTOR}.ppo_epochs"
LOSS_SCALE_FACTOR = f"{ACTOR}.loss_scale_factor"
LR = f"{ACTOR}.optim.lr"
LR_SCHEDULER = f"{ACTOR}.optim.lr_scheduler_type"
USE_KL_LOSS = f"{ACTOR}.use_kl_loss"
KL_LOSS_COEF = f"{ACTOR}.kl_loss_coef"
CLIP_RATIO = f"{ACTOR}.clip_ratio"
CLIP_RATIO_LOW = f"{ACTOR}.clip_ratio_low"
CLIP_RATIO_HIGH = f"{ACTOR}.clip_ratio_high"
CLIP_RATIO_C = f"{ACTOR}.clip_ratio_c"
GRAD_CLIP = f"{ACTOR}.grad_clip"
ROLLOUT_N = f"{ROLLOUT}.n"
TEMPERATURE = f"{ROLLOUT}.temperature"
TOP_P = f"{ROLLOUT}.top_p"
TOP_K = f"{ROLLOUT}.top_k"
PROMPT_LENGTH = f"{ROLLOUT}.prompt_length"
RESPONSE_LENGTH = f"{ROLLOUT}.response_length"
LOG_PROB_MICRO = f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu"
LOG_PROB_MICRO_GLOBAL = f"{ROLLOUT}.log_prob_micro_batch_size"
REF_LOG_PROB_MICRO = f"{REF}.log_prob_micro_batch_size_per_gpu"
REF_LOG_PROB_MICRO_GLOBAL = f"{REF}.log_prob_micro_batch_size"
MODEL_PATH = "actor_rollout_ref.model.path"
LORA_RANK = "actor_rollout_ref.model.lora_rank"
LORA_ALPHA = "actor_rollout_ref.model.lora_alpha"
LORA_TARGET_MODULES = "actor_rollout_ref.model.target_modules"
LORA_EXCLUDE_MODULES = "actor_rollout_ref.model.exclude_modules"
LORA_ADAPTER_PATH = "actor_rollout_ref.model.lora_adapter_path"

# ---- data and trainer ------------------------------------------------------------------------------------------
TRAIN_BATCH = f"{DATA}.train_batch_size"
MAX_PROMPT_LENGTH = f"{DATA}.max_prompt_length"
MAX_RESPONSE_LENGTH = f"{DATA}.max_response_length"
DATA_TOKENIZER = "data.tokenizer"
GEN_BATCH = "data.gen_batch_size"
VAL_BATCH = "data.val_batch_size"
DATA_SEED = "data.seed"
STEPS = "trainer.total_training_steps"
EPOCHS = "trainer.total_epochs"
EXPERIMENT_NAME = "trainer.experiment_name"
LOGGER = "trainer.logger"
MAX_ACTOR_CKPT = "trainer.max_actor_ckpt_to_keep"
MAX_CRITIC_CKPT = "trainer.max_critic_ckpt_to_keep"
ROLLOUT_DATA_DIR = "trainer.rollout_data_dir"
VALIDATION_DATA_DIR = "trainer.validation_data_dir"
RESUME_FROM_PATH = "trainer.resume_from_path"
TEST_FREQ = "trainer.test_freq"  # held-out evaluation every N steps (-1: never; verl's default)
VAL_BEFORE_TRAIN = "trainer.val_before_train"  # ... and once at step 0, before training
VAL_KWARGS = f"{ROLLOUT}.val_kwargs"  # verl's validation sampling: temperature, top_k, top_p, n, do_sample
DEFAULT_HDFS_DIR = "trainer.default_hdfs_dir"

# ---- agentlightning --------------------------------------------------------------------------------------------
TRACE_LEVEL = f"{AGGREGATOR}.level"
TRAJECTORY_MAX_PROMPT = f"{AGGREGATOR}.trajectory_max_prompt_length"
TRAJECTORY_MAX_RESPONSE = f"{AGGREGATOR}.trajectory_max_response_length"
ASYNC_TRAIN_BATCH = "agentlightning.async_rollout.async_train_batch_size"
AGENT_CLASS = "agentlightning.local.agent_class"
K8S_JOB_TEMPLATE = "agentlightning.k8s.job_template_path"

# ---- lab -------------------------------------------------------------------------------------------------------
SEED = f"{LAB}.seed"
RUN_DIR = f"{LAB}.run_dir"
ACTOR_BACKEND = f"{LAB}.actor"
CAP_DROP_UNIT = f"{LAB}.cap_drop_unit"
DEVICE = f"{LAB}.device"
MODEL_PATH_LAB = f"{LAB}.model_path"
MODEL = f"{LAB}.model"
MODEL_HIDDEN = f"{LAB}.model_hidden"
MODEL_LAYERS = f"{LAB}.model_layers"
TASK = f"{LAB}.task"
TASK_SIZE = f"{LAB}.task_size"
MAX_TURNS = f"{LAB}.max_turns"
REWRITE_PROB = f"{LAB}.rewrite_prob"
TURN_COST = f"{LAB}.turn_cost"
HELDOUT_SIZE = f"{LAB}.heldout_size"
CPU_THREADS = f"{LAB}.cpu_threads"
WANDB_MODE = f"{LAB}.wandb_mode"
CURVE_SMOOTHING = f"{LAB}.curve_smoothing"
CURVE_OVERLAY = f"{LAB}.curve_overlay"


def lab_key(name: str) -> str:
    """The dotted key of the ``lab:`` field ``name`` (the tables built from :class:`LabConfig`'s fields use it)."""
    return f"{LAB}.{name}"


# Agent Lightning's three per-rollout settings, in the order the CLI prints them and a run records them.
THREE_SETTINGS = (ROLLOUT_LEVEL, LOSS_MODE, MAX_PPO_UPDATE_TIMES)


# ---- metric names: what a step logs ----------------------------------------------------------------------------
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
VAL_ITEMS_HELD_OUT = "lab/val_items_held_out"  # 1: the evaluated items are disjoint from training's; 0: replayed

# verl's validation metrics (RayPPOTrainer._validate): val-core/{data_source}/{var}/{stat}@{n}, val-aux/...; a lab
# run's data_source is its task (lab.task) and its reward is success, so this is the held-out success rate
VAL_CORE = "val-core"
VAL_AUX = "val-aux"
VAL_CORE_REWARD = "val-core/*/reward/mean@*"  # a pattern (fnmatch): any data source, any n
# what an evaluation logs (str.startswith): its records are no training step's (step 0 holds nothing else)
VALIDATION_METRICS = (f"{VAL_CORE}/", f"{VAL_AUX}/", VAL_ITEMS_HELD_OUT)

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
CRITIC_TOKEN_STATS = {"advantages": "critic/advantages", "returns": "critic/returns"}  # tensor -> /mean, /max, /min
CRITIC_N_TRANSITION_AFTER_DROPPING = "critic/n_transition_after_dropping"
