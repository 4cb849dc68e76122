"""``agl-lab`` (also ``python -m agl_lab``): the lab from the command line.

Every subcommand composes its config from a named base (:data:`agl_lab.config.compose.BASES`) and prints which
first: ``check`` from ``example`` (Agent Lightning's defaults + the example overrides), ``train``, ``demo`` and
``sweep`` from ``short-run`` (+ the short-run preset), ``launch`` from ``agl`` (Agent Lightning's defaults alone:
what its trainer gets). ``check --base agl`` checks exactly what ``launch`` sends.

``agl-lab check [key.path=value ...]`` composes the config like Agent Lightning's training scripts, prints
the three per-rollout settings as resolved, the doctor's findings (and those of what ``launch`` would send), and
runs trainer steps 1–5 on a small built-in batch (rollouts of 1–3 rows), printing each row's advantage mass and
every metric.

``agl-lab train [key.path=value ...]`` runs a short training run (``agl_lab.short_run_config`` + the dotlist)
and prints its run directory as the last line. ``agl-lab demo [--out DIR] [key.path=value ...]`` trains the
settings that matter side by side and writes figures and a summary table (``agl_lab.training.demo``).
``agl-lab sweep [key=a,b ...] --seeds 0 1 2`` trains settings × seeds (:mod:`agl_lab.cli_sweep`).

``agl-lab launch [key.path=value ...]`` exports the experiment for Agent Lightning's real trainer (overrides,
dotlist, launch script; :mod:`agl_lab.config.handoff`) and runs it when ``agentlightning`` is importable, else says
what to install. ``agl-lab lab`` opens JupyterLab on the repository with the notebooks.

Every failure reaches the user as one line on stderr and a documented exit code (:mod:`agl_lab.exit_codes`, listed
by ``agl-lab --help``); ``--debug`` adds the traceback. Secrets given on the command line or in the environment are
masked in everything printed.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from agl_lab.cli_help import DESCRIPTION, EPILOG, SUBCOMMAND_BASES, print_base, print_launch_view, version
from agl_lab.cli_reproduce import add_reproduce_parser, run_reproduce_command
from agl_lab.cli_sweep import add_sweep_parser, run_sweep_command
from agl_lab.cli_weighting import add_weighting_parser, run_weighting_command
from agl_lab.config.checks import lab_estimator_problem
from agl_lab.config.compose import BASES, compose_from
from agl_lab.config.doctor import diagnose
from agl_lab.config.modes import LOSS_MODES, mode_from_config
from agl_lab.config.secrets import redacted_yaml, secret_values
from agl_lab.config.settings import SETTINGS
from agl_lab.core.pipeline import mini_batch_rows, prepare_batch
from agl_lab.core.rows import rows_frame
from agl_lab.exit_codes import MaskingParser, TrainedNothingError, report_errors
from agl_lab.lab.examples import example_rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    MaskingParser.secrets = secret_values(argv)
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "lab":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    result: list[int] = []
    with report_errors(debug=args.debug, secrets=MaskingParser.secrets, result=result):
        result.append(_run(args, extra))
    return result[0]


def _parser() -> argparse.ArgumentParser:
    parser = MaskingParser(
        prog="agl-lab", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=version())
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error, not just its line")
    common = argparse.ArgumentParser(add_help=False)  # every subcommand takes --debug too (after its name)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True)
    add = functools.partial(commands.add_parser, parents=[common])
    check = add("check", help="resolve the three settings, run the doctor and the example batch")
    check.add_argument("dotlist", nargs="*", help="Hydra overrides, e.g. agentlightning.max_ppo_update_times=2")
    check.add_argument("--show-config", action="store_true", help="print the whole composed config (secrets as ***)")
    check.add_argument(
        "--base", choices=tuple(BASES), default=SUBCOMMAND_BASES["check"], help="compose from this base (agl: what "
        "launch sends)",
    )  # fmt: skip
    train = add("train", help="a short training run; prints its run directory last")
    train.add_argument("dotlist", nargs="*", help="Hydra overrides, e.g. lab.seed=1 trainer.total_training_steps=20")
    train.add_argument("--show-config", action="store_true", help="print the resolved config (secrets as ***)")
    demo = add("demo", help="train the settings that matter side by side; write figures and a table")
    demo.add_argument("dotlist", nargs="*", help="Hydra overrides for every run, e.g. lab.seed=1")
    demo.add_argument("--out", default=None, help="output folder (default: a fresh runs/demo-<time>/)")
    launch = add("launch", help="export the experiment for Agent Lightning and run it there if possible")
    launch.add_argument("dotlist", nargs="*", help="Hydra overrides over Agent Lightning's defaults")
    launch.add_argument(
        "--base", choices=tuple(BASES), default=SUBCOMMAND_BASES["launch"], help="compose from this base"
    )
    launch.add_argument("--name", default="experiment", help="names the launch script (launch_<name>.py)")
    launch.add_argument("--out", default=None, help="export folder (default: agl_export/<name>)")
    add_sweep_parser(commands)
    add_reproduce_parser(commands)
    add_weighting_parser(commands)
    commands.add_parser("lab", help="open JupyterLab on the repository's notebooks (other options go to jupyter lab)")
    return parser


def _run(args: argparse.Namespace, extra: list[str]) -> int:
    if args.command == "launch":
        return _launch(args.dotlist, name=args.name, out=args.out, base=args.base)
    if args.command == "sweep":
        return run_sweep_command(args)
    if args.command == "reproduce":
        return run_reproduce_command(args)
    if args.command == "weighting":
        return run_weighting_command(args)
    if args.command == "lab":
        return _lab(extra)
    if args.command == "train":
        return _train(args.dotlist, show_config=args.show_config)
    if args.command == "demo":
        return _demo(args.dotlist, out=args.out)
    return _check(args.dotlist, show_config=args.show_config, base=args.base)


def _train(dotlist: list[str], *, show_config: bool) -> int:
    from agl_lab.curves.summary import SUCCESS, success_first_last
    from agl_lab.training.runs import resolved_config_yaml
    from agl_lab.training.trainer import train

    cfg = compose_from(SUBCOMMAND_BASES["train"], dotlist=dotlist)
    if show_config:
        print(resolved_config_yaml(cfg))
    print_base(SUBCOMMAND_BASES["train"])
    if not _print_settings_and_findings(cfg):
        return 1
    result = train(cfg)
    history = result.history
    if len(history):
        first, last = success_first_last(history[SUCCESS])
        print(
            f"{len(history)} steps{' (stopped early)' if result.stopped else ''}; success rate "
            f"{first:.2f} over the first 20% of steps -> {last:.2f} over the last"
        )
    if result.wandb_run:
        print(f"W&B run: {result.wandb_run}")
    print(result.run_dir)
    if result.stopped:
        return 143 if result.interrupted_by == "SIGTERM" else 130
    if not len(history) or not history.get("training/n_sample_trained", pd.Series([0])).gt(0).any():
        raise TrainedNothingError(
            f"every one of the {len(history)} steps was skipped: no rows were left for a PPO mini-batch after the "
            f"drops (see training/n_sample_dropped/* in {result.run_dir / 'metrics.jsonl'}): lower "
            "actor_rollout_ref.actor.ppo_mini_batch_size or raise data.train_batch_size / the length limits"
        )
    return 0


def _demo(dotlist: list[str], *, out: str | None) -> int:
    from agl_lab.config.settings import DEMO_SETTINGS
    from agl_lab.curves.summary import number
    from agl_lab.curves.verdicts import effects_text
    from agl_lab.training.demo import demo_summary, run_demo

    print_base(SUBCOMMAND_BASES["demo"])
    print("Settings, one short run each:")
    for name, items in DEMO_SETTINGS.items():
        print(f"  {name:<14} {' '.join(items)}")
    result = run_demo(out_dir=out, dotlist=dotlist)
    if not result.table.empty:
        summary = demo_summary(result).drop(columns=["n_seeds", "steps"], errors="ignore")
        print("\n" + summary.to_string(index=False, float_format=number))
    if result.effects is not None:
        print("\n" + effects_text(result.effects))
    print("\nWritten:")
    for path in result.figures.values():
        print(f"  {path}")
    print(result.sweep_dir.resolve())
    if result.stopped:
        return 143 if result.interrupted_by == "SIGTERM" else 130
    failed = result.cells[result.cells.status != "done"]
    for cell in failed.itertuples():
        print(f"agl-lab: {cell.setting} seed {cell.seed} {cell.status}: {cell.error}", file=sys.stderr)
    return 1 if len(failed) else 0


def _launch(dotlist: list[str], *, name: str, out: str | None, base: str) -> int:
    from agl_lab.config.handoff import INSTALL_HINT, export_experiment, launch_blockers

    cfg = compose_from(base, dotlist=dotlist)
    print_base(base)
    if not _print_settings_and_findings(cfg):
        print(f"Nothing exported. `agl-lab check --base {base}` with the same dotlist shows the same findings.")
        return 1
    out_dir = Path(out) if out else Path("agl_export") / name
    export = export_experiment(cfg, out_dir, name=name)
    script = out_dir / f"launch_{name}.py"
    print(f"\nExported to {out_dir}/: overrides.yaml, dotlist.txt, {script.name}")
    print("dotlist:", " ".join(export.dotlist) or "(Agent Lightning's defaults)")
    blockers = launch_blockers()
    if blockers:
        print("\n" + INSTALL_HINT.format(script=script, reasons="; ".join(blockers)), file=sys.stderr)
        return 3
    print(f"\nAgent Lightning's trainer can run here: running {script} (the key comes from $AGL_KEY)")
    return subprocess.call([sys.executable, str(script)])


def _lab(jupyter_args: list[str]) -> int:
    root = Path(__file__).resolve().parents[1]
    if not (root / "notebooks").is_dir():
        print(f"no notebooks/ next to the package at {root}: run from a clone (pip install -e .)", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}"]
    command += ["--LabApp.default_url=/lab/tree/notebooks", *jupyter_args]
    print(" ".join(command))
    return subprocess.call(command)


def _print_settings_and_findings(cfg) -> bool:
    """The three settings and the doctor's findings; False when the doctor found an error."""
    _print_settings(cfg)
    findings = diagnose(cfg)
    print("\nDoctor:" + ("" if findings else " no findings"))
    return _print_findings(findings)


def _print_findings(findings) -> bool:
    """The doctor's findings, errors to stderr; False when there is an error."""
    for finding in findings:
        print(f"  {finding}", file=sys.stderr if finding.level == "error" else sys.stdout)
    return not any(f.level == "error" for f in findings)


def _check(dotlist: list[str], *, show_config: bool, base: str) -> int:
    cfg = compose_from(base, dotlist=dotlist)
    if show_config:
        print(redacted_yaml(cfg))
    print_base(base)
    _print_settings(cfg)
    print(f"  {'PPO mini-batch':<26} {'(ppo_mini_batch_size x rollout.n)':<48} {mini_batch_rows(cfg)} rows")

    findings = diagnose(cfg)
    print("\nDoctor:" + ("" if findings else " no findings"))
    ok = _print_findings(findings)
    if base != SUBCOMMAND_BASES["launch"]:
        print_launch_view(dotlist)
    if not ok:
        return 1
    if problem := lab_estimator_problem(cfg):  # a valid config for Agent Lightning that the example cannot run
        print(f"\nExample batch skipped: {problem}")
        return 0

    rows = example_rows()
    print(
        f"\nExample batch: {len(rows)} rows from {len(set(rows.non_tensor_batch['rollout_id_list']))} rollouts "
        f"of 2 prompts (1–3 rows each; failing rollouts took more calls). Sizes for it: "
        + " ".join(
            f"{k}={_show(cfg, k)}"
            for k in (
                "data.train_batch_size",
                "actor_rollout_ref.rollout.n",
                "actor_rollout_ref.actor.ppo_mini_batch_size",
            )
        )
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch, metrics = prepare_batch(rows, cfg)
    for warning in caught:
        print(f"warning: {warning.message}")
    if len(batch):
        print("\nRows after steps 1–5 (advantage_mass = Σ advantage·mask, the row's weight in a summed loss):")
        print(rows_frame(batch).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print("\nMetrics:")
    table = pd.Series(metrics, dtype=object).rename_axis("metric").rename("value")
    print(table.to_string(float_format=lambda v: f"{v:.4g}"))
    return 0


def _print_settings(cfg) -> None:
    """The settings of the catalogue as resolved (label, key, value), with Agent Lightning's default where they
    differ, and the loss mode the catalogue names for the combination."""
    print("The per-rollout settings, as resolved:")
    for key, setting in SETTINGS.items():
        default = setting.default
        note = "" if OmegaConf.select(cfg, key) == default else f"  (Agent Lightning: {_show_value(key, default)})"
        print(f"  {setting.label:<26} {key:<48} {_show(cfg, key)}{note}")
    mode = mode_from_config(cfg)
    label = LOSS_MODES[mode].label if mode else "none in agl_lab's catalogue (agl_lab.LOSS_MODES)"
    print(f"  {'loss mode':<26} {'(policy loss + loss_agg_mode + divisor)':<48} {label}")


def _show_value(key: str, value) -> str:
    if value is None:
        return "null" + (" (no cap)" if key.endswith("max_ppo_update_times") else "")
    return str(value).lower() if isinstance(value, bool) else str(value)


def _show(cfg, key: str) -> str:
    return _show_value(key, OmegaConf.select(cfg, key))
