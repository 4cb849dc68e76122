"""agl_lab: Agent Lightning v1.0's per-rollout weighting (rollout-level advantage, per_rollout_mean, update cap)
on real verl parts, in a Jupyter lab.

``import agl_lab`` registers the ``per_rollout_mean`` and ``cispo_per_rollout_mean`` policy losses in verl's registry,
and the per-turn advantage estimators (``mt_grpo``, ``mt_grpo_fix``, ``turn_grpo``) in its estimator registry.
The package is one subpackage per kind of thing, bottom up (each imports only those above it in this list):

* ``agl_lab.files`` — files on disk: written whole, JSON lines, batch files, the run readers (``read_run``);
* ``agl_lab.core`` — the batch math on verl ``DataProto`` rows: grouping, trace aggregation, advantage, loss,
  update cap, the trainer's steps 1–5, per-token weights (no UI, tracking or cluster imports);
* ``agl_lab.config`` — composing the config, the catalogues of loss modes and settings, the doctor, the hand-off;
* ``agl_lab.lab`` — batches to study: examples, synthetic batches, the weighting analysis and figures;
* ``agl_lab.curves`` — training histories: readers (run dirs, W&B), bands across seeds, summaries, figures;
* ``agl_lab.training`` — one short training run: task, policy, rollouts, actor, trainer, run files, tracking;
* ``agl_lab.studies`` — studies over many runs: sweeps (Ray), the demo, reproductions, a run's weighting diagnostics;
* ``agl_lab.ui`` — the notebooks' widget panels;
* ``agl_lab.cli`` — the ``agl-lab`` command, a module per subcommand.

``import agl_lab`` itself loads neither torch nor verl (seconds each): the public names load on first use (PEP 562),
and the losses are registered the moment verl's policy-loss module is imported, by this process or already (a
post-import hook: :class:`_AfterImport`, a finder on ``sys.meta_path`` whose loader runs the hook once the module has
executed). So the registry holds them whenever anyone can look, and the ``agl-lab`` command, whose modules live in
this package, prints its help without loading the stack. This module imports only the standard library's lightest
parts: everything before ``agl-lab`` takes its stop signals is time in which Ctrl-C prints a traceback (``wrapt``'s
hook, used before, imported ~100 ms of modules here).

``import agl_lab`` also sets ``OMP_WAIT_POLICY=PASSIVE`` when the environment does not say otherwise: torch's OpenMP
threads then sleep between ops instead of spinning. On a busy machine (a notebook beside a training run) a spinning
thread holds the core its working partner needs; the batch math on 2 threads with 2 busy processes beside it ran
1.2-2.3x faster, and 0.88-0.97x as fast on an idle machine (``benchmarks/bench_process_env.py``). OpenMP reads the
variable when torch first loads, so it counts only where ``agl_lab`` is imported before torch; child processes
(sweep cells, Ray workers, notebook kernels started from the CLI) inherit it.

It also sets ``THP_MEM_ALLOC_ENABLE=1`` when the environment does not say otherwise: torch then asks the kernel for
transparent huge pages (``madvise``) for every CPU tensor of 2 MiB or more. A step's batch math writes a few hundred
MB of fresh tensors (the kept rows' copy, advantages, returns), and with 4 KiB pages most of that time is page faults:
the lab's stages at 10k rows ran 1.36-1.39x faster, Agent Lightning's 1.37-1.40x, idle or beside 2 busy processes,
for 1-3% more peak memory (``benchmarks/bench_process_env.py``). Torch reads the variable at its first allocation of
2 MiB or more, so it counts wherever ``agl_lab`` is imported before that: before ``tensordict`` (so before verl's
``DataProto``), which makes such a tensor as it loads. Child processes inherit it from their start.
:func:`agl_lab.training.process_state.huge_pages_advised` says whether it took effect. Where the kernel's huge-page
``defrag`` setting is ``madvise`` (this machine's), a fault in an advised region may compact memory first: on a
long-running machine whose memory is fragmented that can stall; ``THP_MEM_ALLOC_ENABLE=0`` turns the advice off.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (the docstring's last paragraphs)
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # before torch's first large tensor

__version__ = "0.1.0"


def _drop_cpu_platform_notice(record) -> bool:
    # verl announces at import that it found no GPU and falls back to CUDA names; on a CPU lab that is expected.
    return (
        "accelerator detected" not in record.getMessage() and "registered but not available" not in record.getMessage()
    )


def _quiet_platform_notice(logging) -> None:
    logging.getLogger("verl.plugin.platform.platform_manager").addFilter(_drop_cpu_platform_notice)


# verl lists every optional training engine it could not import (megatron, torchtitan, ...) when its trainer module
# loads, which agl_lab's modules do on first use: noise on a lab machine, and only that module's notices.
warnings.filterwarnings(
    "ignore", message=r".*engine is not available", category=UserWarning, module=r"verl\.workers\.engine"
)
# verl 0.8.0 also warns on every host that NPUs lack MoE router replay, which agl_lab never uses
warnings.filterwarnings("ignore", message="NPU not support router replay", category=UserWarning)


def _register_losses(core_algos: object) -> None:
    # agl_lab.core.loss imports verl only where a loss runs or registers, so it may have loaded before verl's registry
    # did: register now (idempotent).
    importlib.import_module("agl_lab.core.loss").register_in_worker()
    # the per-turn estimators: when that module's own import of verl fired this hook, it is half-loaded here and
    # registers them itself as its import ends
    estimators = sys.modules.get("agl_lab.core.turn_estimators")
    if estimators is None or hasattr(estimators, "register_turn_estimators"):
        importlib.import_module("agl_lab.core.turn_estimators").register_turn_estimators()


class _AfterImport:
    """On ``sys.meta_path``: the module ``name``, found by the other finders, with a loader that runs ``hook(module)``
    once the module has executed (a post-import hook)."""

    def __init__(self, name: str, hook) -> None:
        self.name, self.hook, self.asking = name, hook, False

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname != self.name or self.asking:
            return None
        self.asking = True  # the other finders' answer, without this one
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is not self and hasattr(finder, "find_spec"):
                    spec = finder.find_spec(fullname, path, target)
                    if spec is not None:
                        break
        finally:
            self.asking = False
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRun(spec.loader, self.hook)
        return spec


class _ThenRun:
    """A loader that runs its module as ``loader`` does, then ``hook(module)``; anything else is ``loader``'s."""

    def __init__(self, loader, hook) -> None:
        self.loader, self.hook = loader, hook

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        self.hook(module)

    def __getattr__(self, name: str):
        return getattr(self.loader, name)


def _after_import(name: str, hook) -> None:
    """``hook(module)`` now if ``name`` is imported already, else the moment it is."""
    if name in sys.modules:
        hook(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, hook))


# logging too (verl logs through it): its import alone was a quarter of this module's time
_after_import("logging", _quiet_platform_notice)
_after_import("verl.trainer.ppo.core_algos", _register_losses)

# public name -> module, imported on first access (module-level __getattr__, PEP 562)
_LAZY = {
    "ConfigError": "agl_lab.config.compose",
    "compose_config": "agl_lab.config.compose",
    "short_run_config": "agl_lab.config.compose",
    "Finding": "agl_lab.config.doctor",
    "diagnose": "agl_lab.config.doctor",
    "LabConfig": "agl_lab.config.lab_config",
    "LOSS_MODES": "agl_lab.config.modes",
    "compute_rollout_level_advantage": "agl_lab.core.advantage",
    "CISPO_PER_ROLLOUT_MEAN_LOSS_MODE": "agl_lab.core.loss",
    "PER_ROLLOUT_MEAN_LOSS_MODE": "agl_lab.core.loss",
    "compute_policy_loss_cispo_per_rollout_mean": "agl_lab.core.loss",
    "compute_policy_loss_per_rollout_mean": "agl_lab.core.loss",
    "normalize_advantages_by_rollout": "agl_lab.core.loss",
    "ray_runtime_env": "agl_lab.core.loss",
    "register_in_worker": "agl_lab.core.loss",
    "compute_advantages": "agl_lab.core.pipeline",
    "prepare_batch": "agl_lab.core.pipeline",
    "select_rows": "agl_lab.core.pipeline",
    "build_rows": "agl_lab.core.rows",
    "rows_frame": "agl_lab.core.rows",
    "EmptyBatchWarning": "agl_lab.core.update_cap",
    "apply_update_cap": "agl_lab.core.update_cap",
    "drop_marked_rows": "agl_lab.core.update_cap",
    "compare_settings": "agl_lab.curves.effects",
    "example_rows": "agl_lab.lab.examples",
    "read_run": "agl_lab.files.run_readers",
    "train": "agl_lab.training.trainer",
    "TrainResult": "agl_lab.training.trainer",
    "run_sweep": "agl_lab.studies.sweep",
    "weighting_diagnostics": "agl_lab.studies.weighting_source",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'agl_lab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted(_LAZY)
