"""The real entry points: the ``agl-lab`` console script and ``python -m agl_lab``."""

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import agl_lab
from agl_lab.cli import main
from agl_lab.config.compose import BASES
from agl_lab.config.modes import LOSS_MODES
from agl_lab.config.verl_features import VERL_FEATURES
from conftest import TINY_RUN, only_if

AGL_LAB = str(Path(sys.executable).parent / "agl-lab")


def run(*args, entry=(AGL_LAB,)):
    return subprocess.run([*entry, *args], capture_output=True, text=True, timeout=120)


def test_version_and_help_tell_the_bases_and_the_exit_statuses(capsys):
    result = run("--version")
    assert result.returncode == 0 and result.stdout.startswith(f"agl-lab {agl_lab.__version__} (")
    assert f"verl {version('verl')}" in result.stdout  # 0.9.1, or 0.8.0 in `make test VERL=0.8.0`
    help_text = in_process(capsys, "--help")
    for base in ("agl", "example", "short-run"):  # each base with the subcommands composing from it
        assert f"  {base:<10} {BASES[base].label}" in help_text
    assert "[launch]" in help_text and "[check]" in help_text and "[train, demo, sweep]" in help_text
    assert "exit codes:" in help_text and "    3  launch: exported" in help_text and "  130  stopped" in help_text
    sweep_help = in_process(capsys, "sweep", "--help")
    assert "--seeds" in sweep_help and "ci95 = mean and 95% t-interval of the mean" in " ".join(sweep_help.split())


def in_process(capsys, *args) -> str:
    """``agl-lab ARGS`` called in this process (for what needs no fresh interpreter): its stdout, then its stderr."""
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exit_:  # --help exits
        code = exit_.code
    captured = capsys.readouterr()
    out = captured.out + captured.err  # the doctor's errors go to stderr
    return out if code == 0 else f"exit {code}\n{out}"


def test_check_prints_the_settings_the_doctor_and_the_metrics():
    result = run("check", "agentlightning.max_ppo_update_times=2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"Base: example = {BASES['example'].label}\n")
    assert "rollout-level advantage    algorithm.enable_rollout_level_advantage         true" in out
    assert "loss mode" in out and LOSS_MODES["per_rollout_mean:rows"].label in out  # the catalogue's words
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


def test_misspelt_key_exits_2_naming_the_nearest_key():
    result = run("check", "agentlightning.max_ppo_update_time=2")
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


def test_demo_writes_figures_and_a_summary_table_and_prints_its_folder_last(tmp_path):
    out = tmp_path / "demo"
    result = run("demo", "--out", str(out), *TINY_RUN, entry=(sys.executable, "-m", "agl_lab"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(out.resolve())
    assert not re.search(r"\de[+-]\d", result.stdout), "the summary table prints a number in exponent form"
    for name in ("panels.png", "success.png", "rows_vs_rollouts.png", "drops.png", "summary.csv", "summary.md"):
        assert (out / name).stat().st_size > 0, name
        assert f"  {out / name}" in result.stdout  # listed under "Written:"
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
    result = run("launch", "--out", str(tmp_path / "x"))  # AGL's defaults: gae with rollout-level advantage
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


def test_several_values_are_refused_outside_sweep():
    result = run("train", "lab.seed=0,1")
    assert result.returncode == 2
    assert "lab.seed=0,1: several values (a sweep) are accepted only by `agl-lab sweep`" in result.stderr


def test_sweep_trains_settings_times_seeds_and_writes_the_demos_files(tmp_path):
    out = tmp_path / "sweep"
    result = run(
        "sweep", "agentlightning.max_ppo_update_times=null,1", *TINY_RUN, "--seeds", "0", "1", "--executor", "serial",
        "--out", str(out), "--wandb-mode", "disabled", "--band", "seeds",
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


def test_lab_starts_jupyterlab_from_this_environment_on_the_notebooks():
    result = run("lab", "--version")  # jupyter lab answers and exits: the real command, without a server
    assert result.returncode == 0, result.stderr
    assert "--ServerApp.root_dir=" in result.stdout and "/lab/tree/notebooks" in result.stdout
    assert result.stdout.strip().splitlines()[-1][0].isdigit()  # jupyterlab's version
