"""The real entry points: the ``agl-lab`` console script and ``python -m agl_lab``."""

import subprocess
import sys
from pathlib import Path

from conftest import TINY_RUN

AGL_LAB = str(Path(sys.executable).parent / "agl-lab")


def run(*args, entry=(AGL_LAB,)):
    return subprocess.run([*entry, *args], capture_output=True, text=True, timeout=120)


def test_check_prints_the_settings_the_doctor_and_the_metrics():
    result = run("check", "agentlightning.max_ppo_update_times=2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "algorithm.enable_rollout_level_advantage         true" in out
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


def test_demo_writes_figures_and_a_summary_table_and_prints_its_folder_last(tmp_path):
    out = tmp_path / "demo"
    result = run("demo", "--out", str(out), *TINY_RUN, entry=(sys.executable, "-m", "agl_lab"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(out.resolve())
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


def test_launch_refuses_what_agent_lightning_would_refuse(tmp_path):
    result = run("launch", "--out", str(tmp_path / "x"))  # AGL's defaults: gae with rollout-level advantage
    assert result.returncode == 1 and "gae gives per-token advantages" in result.stderr
    assert not (tmp_path / "x").exists()


def test_lab_starts_jupyterlab_from_this_environment_on_the_notebooks():
    result = run("lab", "--version")  # jupyter lab answers and exits: the real command, without a server
    assert result.returncode == 0, result.stderr
    assert "--ServerApp.root_dir=" in result.stdout and "/lab/tree/notebooks" in result.stdout
    assert result.stdout.strip().splitlines()[-1][0].isdigit()  # jupyterlab's version
