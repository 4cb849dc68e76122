"""agl_lab installs beside what an environment already has: pyproject.toml declares ranges, never pins of torch, wandb
or rliable, and pip, asked to install the built wheel (with the lab's extra) into an environment that already holds
another torch and another wandb than the lock's, keeps both (pip's own resolver, --dry-run --report)."""

import json
import re
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# An Agent Lightning environment's torch is a CUDA build vLLM was made for, its wandb whatever verl pulled: neither is
# the lock's (constraints/verl-0.9.1.txt: torch 2.13.0, wandb 0.31.0). torch 2.14.1 is a CUDA build.
OTHER = {"torch": "2.14.1", "wandb": "0.28.2"}


def locked(name: str) -> str:
    lines = (ROOT / "constraints" / "verl-0.9.1.txt").read_text().splitlines()
    return next(line.split("==")[1] for line in lines if line.lower().startswith(f"{name}=="))


def test_pyproject_declares_ranges_not_pins_of_what_an_agent_lightning_environment_brings():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["lab"]]
    pinned = [r for r in requirements if re.match(r"^(torch|wandb|rliable|verl|numpy)\s*==", r)]
    assert pinned == []
    assert all(locked(name) != version for name, version in OTHER.items())  # the environment below is not the lock


@pytest.fixture(scope="module")
def other_environment(tmp_path_factory):
    """A venv holding torch and wandb at OTHER's versions (real installs, without their dependencies)."""
    env = tmp_path_factory.mktemp("other-env")
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    pins = [f"{name}=={version}" for name, version in OTHER.items()]
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", *pins], check=True, timeout=1200)
    return python


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", out, ROOT],
        check=True,
        timeout=600,
    )
    (built,) = out.glob("agl_lab-*.whl")
    return built


def test_the_wheel_with_the_lab_extra_installs_beside_another_torch_and_wandb_without_replacing_them(
    other_environment, wheel, tmp_path
):
    report = tmp_path / "report.json"
    done = subprocess.run(
        [other_environment, "-m", "pip", "install", "--dry-run", "--quiet", "--report", report,
         f"agl_lab[lab] @ {wheel.as_uri()}"],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    would_install = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in json.loads(
        report.read_text())["install"]}  # fmt: skip
    assert "agl-lab" in would_install or "agl_lab" in would_install  # the report is of this install
    assert {name: would_install.get(name) for name in OTHER} == {"torch": None, "wandb": None}
