"""Fault suite, secrets: a key given to ``agl-lab sweep`` (once, as several values, quoted, from the environment)
never appears in anything printed, and settings that would differ only in a secret are refused naming the key."""

import re
import sys

import pytest

from agl_lab.cli import main
from agl_lab.config.compose import ConfigError
from agl_lab.config.secrets import masked_output
from agl_lab.studies.sweep_plan import plan_sweep
from conftest import TINY_RUN

SECRET, OTHER = "sk-grep-me-0815-4711", "sk-other-key-4242"
KEY = "agentlightning.agl_key"


def run_cli(capsys, *argv):
    try:
        code = main([str(arg) for arg in argv])
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_a_key_given_to_a_sweep_is_masked_in_every_line_it_prints(capsys, tmp_path):
    code, out, err = run_cli(
        capsys, "sweep", *TINY_RUN, "trainer.total_training_steps=1", f"{KEY}={SECRET}", "trainer.logger=[]",
        "--seeds", "0", "--executor", "serial", "--out", tmp_path / "s",
    )  # fmt: skip
    assert code == 0, err[-2000:]
    assert f"every run: {' '.join(TINY_RUN)} trainer.total_training_steps=1 {KEY}=***" in out
    assert SECRET not in out + err
    assert SECRET not in "".join(p.read_text(errors="replace") for p in (tmp_path / "s").rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "item",
    [f"{KEY}={SECRET},{OTHER}", f"{KEY}='{SECRET}','{OTHER}'", f"+{KEY}={SECRET},{OTHER}"],
    ids=["plain", "quoted", "plus"],
)
def test_several_values_of_a_secret_are_refused_naming_the_key_never_the_values(capsys, tmp_path, item):
    code, out, err = run_cli(capsys, "sweep", *TINY_RUN, item, "--seeds", "0", "--out", tmp_path / "s")
    assert code == 2
    assert f"agl-lab: config error: {KEY}: a secret cannot take several values" in err
    assert SECRET not in out + err and OTHER not in out + err
    assert not (tmp_path / "s").exists()


def test_settings_that_differ_only_in_a_secret_are_refused_naming_the_key(tmp_path):
    settings = {"a": [f"{KEY}={SECRET}"], "b": [f"{KEY}={OTHER}"]}
    with pytest.raises(ConfigError) as refused:
        plan_sweep(settings, [0], sweep_dir=tmp_path / "s", dotlist=TINY_RUN)
    text = str(refused.value)
    assert f"settings 'a' and 'b' differ only in the secret {KEY} (values not shown)" in text
    assert "resolve to the same config" not in text  # they do not: only their masks are equal
    assert SECRET not in text and OTHER not in text


@pytest.mark.parametrize("name", ["WANDB_API_KEY", "RAY_AUTH_TOKEN"])
def test_an_environment_key_printed_by_anything_is_masked(name, capfd, monkeypatch):
    monkeypatch.setenv(name, SECRET)
    from agl_lab.config.secrets import secret_values

    with masked_output(secret_values([])):
        print(f"a library echoing its settings: api_key={SECRET}")
        print(f"a warning to stderr {SECRET}!", file=sys.stderr)
    out, err = capfd.readouterr()
    assert out == "a library echoing its settings: api_key=***\n" and err == "a warning to stderr ***!\n"


def test_a_secret_in_an_unparsable_sweep_item_is_not_echoed(capsys, tmp_path):
    code, out, err = run_cli(capsys, "sweep", f"{KEY}='{SECRET}", "--seeds", "0", "--out", tmp_path / "s")
    assert code == 2 and re.search(rf"config error: {re.escape(KEY)}=\*\*\*", err), err
    assert SECRET not in out + err
