"""The real entry points: the ``agl-lab`` console script and ``python -m agl_lab``."""

import importlib
import json
import re
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pandas as pd
import pytest
import yaml
from scipy.stats import ttest_rel

import agl_lab
from agl_lab.cli import main
from agl_lab.cli.sweep import seed_list
from agl_lab.config.bases import BASES
from agl_lab.config.modes import LOSS_MODES
from agl_lab.config.settings import NORMALIZATION
from agl_lab.config.verl_features import VERL_FEATURES
from agl_lab.studies.experiments import EXPERIMENTS
from conftest import TINY_RUN, only_if

AGL_LAB = str(Path(sys.executable).parent / "agl-lab")


def run(*args, entry=(AGL_LAB,)):
    # a guard against a hang, not a time limit: a demo on 2 cores beside the rest of the suite can take minutes
    return subprocess.run([*entry, *args], capture_output=True, text=True, timeout=600)


def test_version_and_help_tell_the_bases_and_the_exit_statuses(capsys):
    result = run("--version")
    assert result.returncode == 0 and result.stdout.startswith(f"agl-lab {agl_lab.__version__} (")
    assert f"verl {version('verl')}" in result.stdout  # 0.9.1, or 0.8.0 in `make test VERL=0.8.0`
    help_text = in_process(capsys, "--help")
    for base in ("agl", "example", "short-run"):  # each base with the subcommands composing from it
        assert f"  {base:<10} {BASES[base].label}" in help_text
    assert "[launch]" in help_text and "[check]" in help_text
    assert "[train, demo, sweep, reproduce, weighting]" in help_text
    assert "exit codes:" in help_text and "    3  a package it needs is not installed" in help_text
    assert "launch: exported" in help_text and "  130  stopped" in help_text
    sweep_help = in_process(capsys, "sweep", "--help")
    assert "--seeds" in sweep_help and "ci95 = mean and 95% t-interval of the mean" in " ".join(sweep_help.split())
    assert "--baseline" in sweep_help


def test_one_registry_lists_every_subcommand_module_once_and_the_parser_is_built_from_it():
    from agl_lab.cli import build_parser
    from agl_lab.cli.commands import Subcommand, subcommands

    registry = subcommands()
    modules = sorted(p.stem for p in (Path(agl_lab.__file__).parent / "cli").glob("*.py") if p.stem != "__init__")
    declared = {
        name: command
        for name in modules
        if isinstance(command := getattr(importlib.import_module(f"agl_lab.cli.{name}"), "COMMAND", None), Subcommand)
    }
    assert sorted(c.name for c in registry) == sorted(c.name for c in declared.values())  # each module's, once
    assert all(command.name == name for name, command in declared.items())  # cli/NAME.py declares NAME
    assert list(build_parser()[1].choices) == [c.name for c in registry]
    assert {c.base for c in registry} <= {*BASES, None} and {c.name for c in registry if c.base is None} == {"lab"}


def test_the_command_line_page_lists_every_subcommand_once_in_the_registrys_order_with_its_base():
    from agl_lab.cli.commands import subcommands

    page = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    table = page.split("| command | what it does | base |\n|---|---|---|\n", 1)[1].split("\n\n", 1)[0]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]
    listed = [(re.match(r"`agl-lab (\w+)", row[0])[1], row[-1].strip("`")) for row in cells]
    assert listed == [(c.name, c.base or "") for c in subcommands()]


# Printing text must not load the stack: the stack alone takes seconds to import, and a command line answers at once.
HELP_PROBE = """
import contextlib, io, json, re, sys
from agl_lab.cli import main
from agl_lab.cli.sweep import seed_list

def run(args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(args)
    return out.getvalue()

names = re.search(r"{(\\w+(?:,\\w+)+)}", run(["--help"])).group(1).split(",")
loaded = {}
for args in (["--version"], ["--help"], *([name, "--help"] for name in names)):
    run(args)
    heavy = sorted(m for m in ("verl", "torch", "ray", "pandas", "matplotlib", "scipy") if m in sys.modules)
    loaded[" ".join(args)] = heavy
print(json.dumps({"names": names, "loaded": loaded}))
"""


def test_help_and_version_load_neither_verl_nor_torch_nor_ray():
    result = subprocess.run([sys.executable, "-c", HELP_PROBE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout.splitlines()[-1])
    assert {"check", "train", "demo", "sweep", "launch", "lab"} <= set(probe["names"])
    assert len(probe["loaded"]) == len(probe["names"]) + 2
    assert {args: heavy for args, heavy in probe["loaded"].items() if heavy} == {}


def called(capsys, *args) -> subprocess.CompletedProcess:
    """``agl-lab ARGS`` called in this process, as :func:`run` reports a process: exit code, stdout, stderr. For what
    a test reads from the output and the files; what only a fresh interpreter shows (an entry point, stray lines at
    exit, signals, secrets a library's logger prints) goes through :func:`run`. Saves each call the seconds a new
    interpreter spends importing torch and verl."""
    capsys.readouterr()
    try:
        code = main(list(map(str, args)))
    except SystemExit as exit_:  # --help exits
        code = exit_.code
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, captured.out, captured.err)


def in_process(capsys, *args) -> str:
    """:func:`called`'s stdout, then its stderr (the doctor's errors), after ``exit N`` when N is not 0."""
    result = called(capsys, *args)
    out = result.stdout + result.stderr
    return out if result.returncode == 0 else f"exit {result.returncode}\n{out}"


def test_check_prints_the_settings_the_doctor_and_the_metrics(capsys):
    result = called(capsys, "check", "agentlightning.max_ppo_update_times=2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"Base: example = {BASES['example'].label}\n")
    assert "rollout-level advantage    algorithm.enable_rollout_level_advantage         true" in out
    assert NORMALIZATION in out and LOSS_MODES["per_rollout_mean:rows"].label in out  # the catalogue's words
    assert "actor_rollout_ref.actor.policy_loss.loss_mode    per_rollout_mean" in out
    assert "agentlightning.max_ppo_update_times              2" in out
    assert "Doctor: no findings" in out
    # 12 example rows, mini-batches of 3, cap 2 -> 6 trained
    assert "training/n_sample_collected                                 12" in out
    assert "training/n_sample_trained                                    6" in out
    assert "training/rollout_level_advantage/n_rollouts" in out
    assert "rollout_mass" in out


def test_python_dash_m_and_show_config():
    result = run("check", "--show-config", entry=(sys.executable, "-m", "agl_lab"))
    assert result.returncode == 0, result.stderr
    assert "agentlightning:" in result.stdout and "max_ppo_update_times: null" in result.stdout


def test_misspelt_key_exits_2_naming_the_nearest_key(capsys):
    result = called(capsys, "check", "agentlightning.max_ppo_update_time=2")
    assert result.returncode == 2
    assert "did you mean 'agentlightning.max_ppo_update_times'?" in result.stderr


def test_doctor_errors_exit_1_before_running_the_example():
    result = run("check", "algorithm.adv_estimator=remax")
    assert result.returncode == 1
    # errors go to stderr, one line each; notes and warnings stay on stdout
    assert result.stderr.splitlines() == [
        "  error   algorithm.adv_estimator: REMAX baseline not yet supported in AgentLightningRayPPOTrainer -> fix: "
        "use algorithm.adv_estimator=grpo (or rloo, reinforce_plus_plus)"
    ]
    assert "note    agentlightning.max_ppo_update_times" in result.stdout
    assert "Metrics:" not in result.stdout


# Short runs through the real entry point, with conftest.TINY_RUN's sizes.


def test_train_prints_the_run_directory_last_and_masks_secrets(tmp_path):
    secret = "sk-cli-secret-0815"
    run_dir = tmp_path / "run"
    result = run("train", *TINY_RUN, f"lab.run_dir={run_dir}", f"agentlightning.agl_key={secret}", "--show-config")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(run_dir)
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
    assert "agl_key: '***'" in result.stdout and "per_rollout_mean" in result.stdout
    assert secret not in result.stdout + result.stderr
    assert "2 steps; success rate" in result.stdout


@only_if(VERL_FEATURES["verl-actor"].available())  # verl 0.8.0 refuses it: tests/test_verl_actor.py
def test_train_on_verls_own_actor_engine(tmp_path):
    # the command, at TINY_RUN's sizes: agl-lab train lab.actor=verl trainer.total_training_steps=3
    run_dir = tmp_path / "run"
    sizes = [item for item in TINY_RUN if not item.startswith("trainer.total_training_steps=")]
    result = run("train", *sizes, "lab.actor=verl", "trainer.total_training_steps=3", f"lab.run_dir={run_dir}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(run_dir)
    assert "3 steps; success rate" in result.stdout
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 3
    assert "actor: verl" in (run_dir / "config.yaml").read_text()
    assert "Traceback" not in result.stderr and "is_fx_tracing" not in result.stderr


def test_demo_writes_figures_and_a_summary_table_and_prints_its_folder_last(tmp_path, capsys):
    out = tmp_path / "demo"
    result = called(capsys, "demo", "--out", str(out), *TINY_RUN)  # `python -m agl_lab`: test_python_dash_m_and_...
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(out.resolve())
    assert not re.search(r"\de[+-]\d", result.stdout), "the summary table prints a number in exponent form"
    files = ("panels.png", "success.png", "rows_vs_rollouts.png", "drops.png", "summary.csv", "summary.md")
    for name in (*files, "effects.csv", "effects.md"):
        assert (out / name).stat().st_size > 0, name
        assert f"  {out / name}" in result.stdout  # listed under "Written:"
    # one seed: the effects table says so rather than guess, after the summary and before the files
    effects = result.stdout.split("Effects on lab/success_rate (per run, the mean over the last 20%", 1)[1]
    lines = effects.split("\nWritten:", 1)[0].strip().splitlines()[1:]
    assert [line.split(":")[0].strip() for line in lines] == ["both_on − both_off", "both_on_cap2 − both_off"]
    assert all(line.endswith("from 1 pair: need ≥ 2 seeds per setting") for line in lines), lines
    assert (
        (out / "effects.csv")
        .read_text()
        .startswith(
            "setting,baseline,metric,n_pairs,mean_diff,sd_diff,ci_low,ci_high,p_value,seeds_needed,method\nboth_on,both_off,"
        )
    )
    summary = (out / "summary.csv").read_text().splitlines()
    assert summary[0].startswith("setting,n_seeds,steps,success_first_20pct,success_last_20pct")
    assert [line.split(",")[0] for line in summary[1:]] == ["both_on", "both_off", "both_on_cap2"]
    assert (out / "summary.md").read_text().startswith("| setting |")
    assert all((out / name / "seed-0" / "metrics.jsonl").exists() for name in ("both_on", "both_off", "both_on_cap2"))


def test_launch_exports_for_agent_lightning_and_says_what_to_install(tmp_path):
    out = tmp_path / "export"
    result = run(
        "launch",
        "algorithm.adv_estimator=grpo",
        "agentlightning.max_ppo_update_times=2",
        "agentlightning.agl_key=sk-do-not-export",
        "--name",
        "cap2",
        "--out",
        str(out),
    )
    assert result.returncode == 3, result.stderr  # exported, not launched: agentlightning needs Python >= 3.12
    assert "Agent Lightning's trainer cannot run here (Python 3.11 < 3.12" in result.stderr
    assert "launch_cap2.py" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["dotlist.txt", "launch_cap2.py", "overrides.yaml"]
    assert (out / "dotlist.txt").read_text().split() == [
        "algorithm.adv_estimator=grpo",
        "agentlightning.max_ppo_update_times=2",
    ]
    for file in out.iterdir():
        assert "sk-do-not-export" not in file.read_text()
    assert "sk-do-not-export" not in result.stdout + result.stderr


def test_launch_refuses_what_agent_lightning_would_refuse_and_check_says_so_first(tmp_path, capsys):
    result = called(capsys, "launch", "--out", tmp_path / "x")  # AGL's defaults: gae with rollout-level advantage
    assert result.returncode == 1 and "gae gives per-token advantages" in result.stderr
    assert result.stdout.startswith(f"Base: agl = {BASES['agl'].label}\n")
    assert "Nothing exported. `agl-lab check --base agl`" in result.stdout
    assert not (tmp_path / "x").exists()
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("  error")]
    # check (base example) passes, and says what launch will stop at, in the same words
    check = in_process(capsys, "check")
    assert not check.startswith("exit") and "What `agl-lab launch` sends with this dotlist (base agl):" in check
    assert error in check.splitlines()
    # check --base agl checks exactly what launch sends: the same finding, the same exit status
    exact = in_process(capsys, "check", "--base", "agl")
    assert exact.startswith("exit 1\n") and error in exact.splitlines()
    # with the fix, launch goes on (and check says launch has no errors)
    fixed = in_process(capsys, "launch", "algorithm.adv_estimator=grpo", "--out", str(tmp_path / "y"))
    assert fixed.startswith("exit 3\n") and (tmp_path / "y" / "overrides.yaml").exists()
    assert "(base agl): no errors" in in_process(capsys, "check", "algorithm.adv_estimator=grpo")


def test_check_and_launch_read_a_config_file_before_the_items(tmp_path, capsys):
    file = tmp_path / "mine.yaml"
    file.write_text("algorithm:\n  adv_estimator: grpo\nagentlightning:\n  max_ppo_update_times: 2\n")
    # from base example (the lab trainer's rules) check says what launch sends over the same file
    out = in_process(capsys, "check", "--base", "example", "--config", file)
    assert out.startswith(f"Base: example = {BASES['example'].label}\nConfig file: {file} (")
    assert "What `agl-lab launch` sends with this file and dotlist (base agl): no errors" in out
    half = tmp_path / "half.yaml"
    half.write_text("data: {train_batch_size: 4}\n")  # Agent Lightning's estimator stays gae: launch would stop
    out = in_process(capsys, "check", "--base", "example", "--config", half)
    assert "What `agl-lab launch` sends with this file and dotlist (base agl):\n" in out
    assert "gae gives per-token advantages" in out
    said = in_process(capsys, "launch", "--config", half, "--out", tmp_path / "no")
    assert said.startswith("exit 1\n") and f"`agl-lab check --base agl --config {half}` with the same" in said
    # launch exports what the file and the items say
    said = in_process(capsys, "launch", "--config", file, "trainer.total_epochs=3", "--out", tmp_path / "x")
    assert said.startswith("exit 3\n")
    exported = yaml.safe_load((tmp_path / "x" / "overrides.yaml").read_text())
    assert exported == {
        "algorithm": {"adv_estimator": "grpo"},
        "trainer": {"total_epochs": 3},
        "agentlightning": {"max_ppo_update_times": 2},
    }


def test_a_config_file_that_cannot_be_read_or_is_not_yaml_is_one_line_and_its_exit_code(tmp_path, capsys):
    missing = called(capsys, "check", "--config", tmp_path / "nope.yaml")
    assert missing.returncode == 5 and missing.stdout == ""
    assert missing.stderr.startswith(f"agl-lab: file error: config file {tmp_path / 'nope.yaml'} does not exist")
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: [grpo\n")
    result = called(capsys, "check", "--config", bad)
    assert result.returncode == 2 and result.stdout == "" and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"agl-lab: config error: {bad} is not YAML: ")


def test_launch_prints_commands_a_shell_reads_back_whatever_the_folder_and_values(tmp_path, capsys):
    out = tmp_path / "my exports" / "it's here"
    item = "trainer.experiment_name='two words'"
    text = in_process(capsys, "launch", "algorithm.adv_estimator=grpo", item, "--name", "x", "--out", str(out))
    assert text.startswith("exit 3\n")  # exported; Agent Lightning's trainer cannot run here
    (dotlist,) = [line for line in text.splitlines() if line.startswith("dotlist: ")]
    assert shlex.split(dotlist.removeprefix("dotlist: ")) == ["algorithm.adv_estimator=grpo", item]
    command = text.split("`AGL_KEY=... ", 1)[1].split("`", 1)[0]  # the hint's command, as a user copies it
    assert shlex.split(command)[:2] == ["python", str(out / "launch_x.py")]


def test_launch_record_exports_a_script_that_trains_through_the_recorder(tmp_path, capsys):
    out = tmp_path / "r"
    said = in_process(capsys, "launch", "algorithm.adv_estimator=grpo", "--out", str(out), "--record", "runs/r")
    assert said.startswith("exit 3\n") and "runs Agent Lightning's trainer through agl_lab's recorder" in said
    script = (out / "launch_experiment.py").read_text()
    compile(script, "launch_experiment.py", "exec")
    assert "RECORD = 'runs/r'" in script and "from agl_lab.training.agl_recorder import record_run" in script


def test_several_values_are_refused_outside_sweep(capsys):
    result = called(capsys, "train", "lab.seed=0,1")
    assert result.returncode == 2
    assert "lab.seed=0,1: several values (a sweep) are accepted only by `agl-lab sweep`" in result.stderr


def test_a_typod_value_is_one_error_naming_the_nearest_and_nothing_runs(capsys, tmp_path):
    typo = "actor_rollout_ref.actor.policy_loss.loss_mode=per_rollout_maen"
    error = (
        "actor_rollout_ref.actor.policy_loss.loss_mode: unknown value 'per_rollout_maen' (did you mean "
        "'per_rollout_mean'?) -> fix: use one of: "
    )
    # train: the item after --show-config counts (lab.seed: 7), the doctor says one thing, on stderr, and stops
    capsys.readouterr()
    assert main(["train", "--show-config", "lab.seed=7", typo]) == 1
    out, err = capsys.readouterr()
    assert "\n  seed: 7\n" in out and "warning" not in out and "note" not in out
    assert len(err.splitlines()) == 1 and err.startswith(f"  error   {error}")
    # sweep: --seeds takes its seeds and leaves the item; every setting is checked before anything is created
    out_dir = tmp_path / "sweep"
    argv = ["sweep", "--seeds", "0", "1", f"{typo},vanilla", "--executor", "serial", "--out", str(out_dir)]
    assert main(argv) == 1  # the doctor's error, as for train
    out, err = capsys.readouterr()
    assert out == f"Base: short-run = {BASES['short-run'].label}\n"
    setting = "loss_mode-per_rollout_maen"
    assert len(err.splitlines()) == 1 and err.startswith(f"agl-lab: config error: setting {setting!r}: {error}")
    assert not out_dir.exists()


@pytest.mark.parametrize(
    ("given", "seeds"), [("3", [3]), ("0,1,2", [0, 1, 2]), ("0-4", [0, 1, 2, 3, 4]), ("7,0-1", [7, 0, 1])]
)
def test_seeds_are_integers_lists_or_ranges(given, seeds):
    assert seed_list(given) == seeds


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ("0-x", "'0-x' is not a seed: give integers (0 1 2), a list (0,1,2) or a range (0-4)"),
        ("1,,2", "'1,,2' is not a seed"),
        ("4-1", "'4-1' is an empty range: the first seed comes first (0-4)"),
    ],
)
def test_a_seed_that_is_none_is_a_usage_error(capsys, given, error):
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", "--seeds", given])
    assert exit_.value.code == 2 and f"argument --seeds: {error}" in capsys.readouterr().err


def test_sweep_trains_settings_times_seeds_and_writes_the_demos_files(tmp_path, capsys):
    out = tmp_path / "sweep"
    result = called(  # in the order people type: options, then the items (--seeds never takes one)
        capsys, "sweep", "--seeds", "0-1", *TINY_RUN, "--executor", "serial", "--out", str(out),
        "agentlightning.max_ppo_update_times=null,1", "--wandb-mode", "disabled", "--band", "seeds",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == f"Base: short-run = {BASES['short-run'].label}"
    assert lines[1] == f"Sweep: 2 settings x 2 seeds (0 1), serial, in {out}/"
    assert lines[2].split() == ["max_ppo_update_times-null", "agentlightning.max_ppo_update_times=null"]
    assert lines[-1] == str(out.resolve())
    cells = sorted(p.parent.relative_to(out).as_posix() for p in out.rglob("cell.json"))
    assert cells == [f"max_ppo_update_times-{c}/seed-{s}" for c in ("1", "null") for s in (0, 1)]
    summary = (out / "summary.csv").read_text().splitlines()
    assert [line.split(",")[:2] for line in summary[1:]] == [
        ["max_ppo_update_times-null", "2"],
        ["max_ppo_update_times-1", "2"],
    ]
    assert all((out / name).stat().st_size > 0 for name in ("panels.png", "success.png", "summary.md"))
    # the effects against the first setting (the default baseline here) are scipy's paired t-test of the runs' success
    # over their last 20% of steps (2 steps: the last one), read back from each run's metrics.jsonl
    last = {
        (c, s): json.loads(
            (out / f"max_ppo_update_times-{c}" / f"seed-{s}" / "metrics.jsonl").read_text().splitlines()[-1]
        )["lab/success_rate"]
        for c in ("null", "1")
        for s in (0, 1)
    }
    test = ttest_rel([last[("1", s)] for s in (0, 1)], [last[("null", s)] for s in (0, 1)])
    effects = pd.read_csv(out / "effects.csv").iloc[0]
    assert (effects.setting, effects.baseline, effects.n_pairs) == (
        "max_ppo_update_times-1",
        "max_ppo_update_times-null",
        2,
    )
    assert effects.p_value == pytest.approx(test.pvalue, nan_ok=True)
    assert effects.ci_low == pytest.approx(test.confidence_interval().low, nan_ok=True)
    assert "max_ppo_update_times-1 − max_ppo_update_times-null: " in result.stdout


def test_sweep_refuses_a_baseline_it_does_not_sweep_before_anything_runs(tmp_path, capsys):
    result = called(
        capsys, "sweep", "lab.seed=0", "--baseline", "nope", "--out", tmp_path / "s", "--executor", "serial"
    )
    assert result.returncode == 2 and not (tmp_path / "s").exists()
    assert (
        "--baseline 'nope' is not a setting of this sweep; choose one of ['both_on', 'both_off', 'both_on_cap2']"
        in (result.stderr)
    )


def test_reproduce_lists_its_experiments_refuses_unknown_ones_and_runs_one(tmp_path, capsys):
    listed = called(capsys, "reproduce", "--list")
    assert listed.returncode == 0 and "row-split\n  claim: " in listed.stdout and "arXiv:2503.20783" in listed.stdout
    unknown = called(capsys, "reproduce", "nope")
    assert unknown.returncode == 2
    assert f"unknown experiment 'nope'; choose one of {list(EXPERIMENTS)}" in unknown.stderr
    out = tmp_path / "cap"
    result = called(
        capsys, "reproduce", "update-cap", *TINY_RUN, "--pilot-seeds", "2", "--max-seeds", "2", "--executor", "serial",
        "--wandb-mode", "disabled", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == f"Base: short-run = {BASES['short-run'].label}" and lines[1].startswith(
        "Reproduction update-cap: "
    )
    assert lines[-1] == str(out.resolve())
    assert "Checks (2 seeds, " in result.stdout and "] lab/ppo_updates (all): both_on_cap2 − both_on: " in result.stdout
    assert re.search(r"\nupdate-cap: (reproduced|NOT reproduced)\n", result.stdout)
    assert f"  {out / 'report.md'}" in result.stdout and (out / "report.md").read_text().startswith("# Reproduction")
    assert sorted(p.parent.relative_to(out).as_posix() for p in out.rglob("cell.json")) == [
        f"{setting}/seed-{seed}" for setting in ("both_on", "both_on_cap2") for seed in (0, 1)
    ]
    # the record it wrote redraws the report without training; the checks' lines are the same
    redrawn = called(capsys, "reproduce", "update-cap", "--report-only", "--record", out / "record", "--out",
                     tmp_path / "redrawn")  # fmt: skip
    assert redrawn.returncode == 0, redrawn.stderr
    assert "Base: " not in redrawn.stdout and "  recorded 20" in redrawn.stdout
    checks = [line for line in result.stdout.splitlines() if line.startswith("  [")]
    assert checks and checks == [line for line in redrawn.stdout.splitlines() if line.startswith("  [")]
    assert (tmp_path / "redrawn" / "report.md").read_text() == (out / "report.md").read_text()
    misused = called(capsys, "reproduce", "update-cap", "--record", out / "record")
    assert misused.returncode == 2 and "--record names the record to redraw a report from" in misused.stderr
    nothing = called(capsys, "reproduce", "update-cap", "--report-only", "--record", tmp_path)
    assert nothing.returncode != 0 and "is no reproduction record (missing table.csv.gz" in nothing.stderr
