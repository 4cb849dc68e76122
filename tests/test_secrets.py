import enum

from omegaconf import OmegaConf

from agl_lab.config.secrets import MASK, is_secret_key, redact, redacted_yaml


def test_secret_names():
    for key in (
        "agentlightning.agl_key",
        "trainer.wandb_api_key",
        "x.apiKey",
        "hf_token",
        "db.password",
        "client_secret",
    ):
        assert is_secret_key(key), key
    for key in ("agentlightning.agl_base_url", "algorithm.kl_ctrl", "actor.max_token_len", "tokenizer_path"):
        assert not is_secret_key(key), key


def test_redact_masks_values_and_keeps_empty_ones_visible():
    config = {
        "agentlightning": {"agl_key": "sk-123", "agl_base_url": "http://x"},
        "trainer": {"wandb_api_key": "", "logger": ["console"]},
        "env": [{"OPENAI_API_KEY": "abc"}],
    }
    assert redact(config) == {
        "agentlightning": {"agl_key": MASK, "agl_base_url": "http://x"},
        "trainer": {"wandb_api_key": "", "logger": ["console"]},
        "env": [{"OPENAI_API_KEY": MASK}],
    }
    assert config["agentlightning"]["agl_key"] == "sk-123"  # a copy: the original is untouched


def test_no_secret_in_anything_a_check_export_run_or_sweep_writes_or_prints(tmp_path, monkeypatch, capfd):
    """Grep every file and every line of output for the key; it was given everywhere a user might give it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    from agl_lab import run_sweep
    from agl_lab.cli import main
    from agl_lab.config.compose import ConfigError
    from conftest import TINY_RUN, torn_model

    secret = "sk-grep-me-0815-4711"
    key = f"agentlightning.agl_key={secret}"
    monkeypatch.chdir(tmp_path)
    printed = []
    # check: the resolved config, values echoed by a type error, sweep syntax, an unparsable item, a usage error,
    # a traceback
    for argv in (
        ["check", key, "--show-config"],
        ["check", f"agentlightning.agl_key=[{secret}]"],
        ["check", f"{key},other"],
        ["check", f"agentlightning.agl_key='{secret}"],
        ["check", "--agl-key", secret],
        ["--debug", "check", f"agentlightning.agl_key=[{secret}]"],
        ["launch", "algorithm.adv_estimator=grpo", key, "--out", str(tmp_path / "export")],
    ):
        try:
            main(argv)
        except SystemExit:  # argparse's usage error
            pass
    # a run, as a process: W&B offline (it records the command line) and verl's file backend
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "HOME": str(tmp_path), "AGL_KEY": secret}
    run = subprocess.run(
        [str(Path(sys.executable).parent / "agl-lab"), "train", *TINY_RUN, key]
        + ["trainer.logger=[wandb,file,console]", f"lab.run_dir={tmp_path / 'run'}", "--show-config"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    printed += [run.stdout, run.stderr]
    # a sweep with the key in its dotlist (and one failing cell, whose error is recorded: a model with torn weights)
    settings = {"ok": [], "bad": [f"lab.model_path={torn_model(tmp_path / 'not-a-model')}"]}
    result = run_sweep(settings, [0], sweep_dir=tmp_path / "sweep", dotlist=[*TINY_RUN, key], executor="serial")
    print(result.cells.to_string(), result.table.head().to_string())
    with pytest.raises(ConfigError) as refused:
        run_sweep({"a": [f"agentlightning.agl_key=[{secret}]"]}, [0], sweep_dir=tmp_path / "s2", dotlist=TINY_RUN)
    printed.append(str(refused.value))

    captured = capfd.readouterr()
    printed += [captured.out, captured.err]
    files = [path for path in tmp_path.rglob("*") if path.is_file() and not path.is_symlink()]
    found = [str(path) for path in files if secret.encode() in path.read_bytes()]
    found += [text[max(0, text.find(secret) - 80) :][:160] for text in printed if secret in text]
    assert found == []
    # the key did reach every place, masked: the test looked where it would have been
    assert "agl_key: '***'" in (tmp_path / "run" / "config.yaml").read_text()
    assert "agl_key: '***'" in captured.out + run.stdout
    cell = (tmp_path / "sweep" / "ok" / "seed-0" / "cell.json").read_text()
    assert "agentlightning.agl_key=***" in cell
    assert any(p.suffix == ".wandb" for p in files) and (tmp_path / "run" / "tracking.jsonl").exists()
    assert len(files) >= 20  # config, metrics, timings, policy, W&B run, tracking.jsonl, cells, export, ...


class _Level(enum.Enum):
    HIGH = 1


def test_redacted_yaml_is_the_text_of_the_redacted_config_dumped_by_omegaconf():
    """The dump without rebuilding a config equals ``OmegaConf.to_yaml`` of one built from the redacted values: the
    lab's whole tree with a secret set, and strings YAML would read as other types, interpolations, enums, unicode."""
    import agl_lab

    odd = {"null": "null", "number": "1.0", "colon": "a: b", "empty": "", "missing": "???", "unicode": "é✓",
           "multiline": "a\nb", "long": "word " * 40, "big": 10**20, "tiny": 1e-9, "ref": "${.number}",
           "escaped": "\\${not.a.ref}", "level": _Level.HIGH, "hf_token": "hf-abcdef"}  # fmt: skip
    configs = [
        agl_lab.short_run_config(dotlist=["agentlightning.agl_key=sk-secret-1234", "lab.seed=3"]),
        OmegaConf.create({"odd": odd, "list": [1, 2.5, None, True, {"api_key": "k-123456"}]}),
    ]
    for cfg in configs:
        rebuilt = OmegaConf.to_yaml(OmegaConf.create(redact(OmegaConf.to_container(cfg, resolve=True))))
        assert redacted_yaml(cfg) == rebuilt
        assert "sk-secret-1234" not in redacted_yaml(cfg) and "hf-abcdef" not in redacted_yaml(cfg)
    assert "level: HIGH" in redacted_yaml(configs[1]) and "agl_key: '***'" in redacted_yaml(configs[0])
