"""Every dotted config key agl_lab reads, spelled once: the rest of the package imports these names.

The keys are verl's and Agent Lightning's own (``algorithm.*``, ``actor_rollout_ref.*``, ``data.*``, ``trainer.*``,
``agentlightning.*``; AGL_FACTS.md §Config) plus the ``lab:`` section (:class:`agl_lab.config.lab_config.LabConfig`).
The module sits in ``core/``, the lowest layer, so that the pipeline's messages, the config's tables (types,
ranges, the doctor), the panels and the CLI all name a key through the same constant; a renamed key is one edit.
What a key's values may be lives in :data:`agl_lab.config.constraints.CONSTRAINTS` (ranges) and
:mod:`agl_lab.config.key_types` (types), never here.
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
MODEL_HIDDEN = f"{LAB}.model_hidden"
MODEL_LAYERS = f"{LAB}.model_layers"
TASK = f"{LAB}.task"
TASK_SIZE = f"{LAB}.task_size"
MAX_TURNS = f"{LAB}.max_turns"
REWRITE_PROB = f"{LAB}.rewrite_prob"
TURN_COST = f"{LAB}.turn_cost"
CPU_THREADS = f"{LAB}.cpu_threads"
WANDB_MODE = f"{LAB}.wandb_mode"
CURVE_SMOOTHING = f"{LAB}.curve_smoothing"
CURVE_OVERLAY = f"{LAB}.curve_overlay"


def lab_key(name: str) -> str:
    """The dotted key of the ``lab:`` field ``name`` (the tables built from :class:`LabConfig`'s fields use it)."""
    return f"{LAB}.{name}"


# Agent Lightning's three per-rollout settings, in the order the CLI prints them and a run records them.
THREE_SETTINGS = (ROLLOUT_LEVEL, LOSS_MODE, MAX_PPO_UPDATE_TIMES)
