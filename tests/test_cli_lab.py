"""``agl-lab lab``: the notebooks copied into a folder (never over a user's copy), JupyterLab on it with the user's
options winning, and, from a wheel of this tree installed in a fresh venv, a server that stops with its command."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

from agl_lab.cli.lab import SHIPPED_NOTEBOOKS

ROOT = Path(__file__).resolve().parents[1]
AGL_LAB = str(Path(sys.executable).parent / "agl-lab")
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))


def lab(*args, cwd=None, timeout=120):
    """``agl-lab lab ARGS`` with jupyter's --show-config: the server's settings printed, no server started."""
    return subprocess.run(
        [AGL_LAB, "lab", *args, "--show-config"], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def test_the_package_ships_the_repositorys_notebooks_and_sample_batch():
    from agl_lab.files.batch_io import sample_batch_path

    assert NOTEBOOKS and sorted(p.name for p in SHIPPED_NOTEBOOKS.glob("*.ipynb")) == NOTEBOOKS
    assert SHIPPED_NOTEBOOKS.resolve() == (ROOT / "notebooks").resolve()  # one copy of each, in notebooks/
    assert sample_batch_path().resolve() == (ROOT / "data" / "sample_batch").resolve()
    assert sample_batch_path().is_relative_to(ROOT / "agl_lab")  # found through the package, wheel or clone


def test_copies_the_notebooks_once_and_never_over_the_users_copies(tmp_path):
    result = lab(cwd=tmp_path)  # DIR defaults to ./agl-lab-notebooks
    folder = tmp_path / "agl-lab-notebooks"
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"Copied into agl-lab-notebooks/: {' '.join(NOTEBOOKS)}"
    assert sorted(p.name for p in folder.iterdir()) == NOTEBOOKS
    assert all((folder / n).read_bytes() == (ROOT / "notebooks" / n).read_bytes() for n in NOTEBOOKS)
    assert f".root_dir = '{folder.resolve()}'" in result.stdout  # the server's root is the folder

    (folder / NOTEBOOKS[0]).write_text("my edits")
    (folder / NOTEBOOKS[1]).unlink()
    again = lab(str(folder))
    assert again.returncode == 0, again.stderr
    assert f"Copied into {folder}/: {NOTEBOOKS[1]}" in again.stdout
    assert f"Kept in {folder}/ as they are (yours are never overwritten; delete one to get it anew): " in again.stdout
    assert (folder / NOTEBOOKS[0]).read_text() == "my edits"
    assert (folder / NOTEBOOKS[1]).read_bytes() == (ROOT / "notebooks" / NOTEBOOKS[1]).read_bytes()


def test_make_lab_serves_the_clones_notebooks_as_they_are():
    before = sorted((ROOT / "notebooks").iterdir())
    result = lab("notebooks", cwd=ROOT)  # what `make lab` runs
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "Serving agl_lab's own notebooks in notebooks/"
    assert f".root_dir = '{(ROOT / 'notebooks').resolve()}'" in result.stdout
    assert sorted((ROOT / "notebooks").iterdir()) == before


def test_jupyters_options_pass_through_and_the_users_root_dir_wins(tmp_path):
    result = lab(str(tmp_path / "nb"), f"--ServerApp.root_dir={tmp_path}", "--ServerApp.port=9")
    assert result.returncode == 0, result.stderr
    assert "only accepts one value" not in result.stderr
    assert f".root_dir = '{tmp_path}'" in result.stdout and ".port = 9" in result.stdout
    assert (tmp_path / "nb" / NOTEBOOKS[0]).exists()
    alias = lab(str(tmp_path / "nb"), "--notebook-dir", str(tmp_path / "nb"))
    assert alias.returncode == 0 and f".root_dir = '{tmp_path / 'nb'}'" in alias.stdout, alias.stderr


def test_a_folder_that_is_a_file_is_one_line_and_exit_5(tmp_path):
    (tmp_path / "taken").write_text("")
    result = lab(str(tmp_path / "taken"))
    assert result.returncode == 5
    error = f"agl-lab: file error: {tmp_path / 'taken'} is a file: give a folder for the notebooks"
    assert result.stderr.splitlines() == [error]


def test_a_wheel_in_a_fresh_venv_serves_the_notebooks_and_stops_with_its_command(tmp_path):
    wheel = _wheel_of_this_tree(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"agl_lab/notebooks/{n}" for n in NOTEBOOKS} <= names
    assert {"agl_lab/data/sample_batch/batch.json", "agl_lab/data/sample_batch/tensors.safetensors"} <= names
    assert {str(p.relative_to(ROOT)) for p in (ROOT / "agl_lab").rglob("*.py")} <= names

    venv = _fresh_venv_with(wheel, tmp_path / "venv")
    port, token, folder = _free_port(), "agl-lab-test", tmp_path / "work" / "nb"
    folder.parent.mkdir()
    shared = Path(sysconfig.get_paths()["data"]) / "share" / "jupyter"  # jupyter's data files (a .pth cannot share)
    env = {
        **os.environ,
        "JUPYTER_PATH": str(shared),
        "JUPYTERLAB_DIR": str(shared / "lab"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"),
    }
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [str(venv / "bin" / "agl-lab"), "lab", "nb", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", "--allow-root"],
            cwd=folder.parent, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        contents = _when_answering(f"http://127.0.0.1:{port}/api/contents?token={token}", server, log)
        assert sorted(item["name"] for item in contents["content"]) == NOTEBOOKS  # the root is the copied folder
        assert all((folder / n).read_bytes() == (ROOT / "notebooks" / n).read_bytes() for n in NOTEBOOKS)
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        with socket.socket() as probe:  # nothing serves the port any more: the server was the command itself
            assert probe.connect_ex(("127.0.0.1", port)) != 0, log.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever it started, orphans included, goes too
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    output = log.read_text()
    assert f"Copied into nb/: {' '.join(NOTEBOOKS)}" in output
    assert str(venv / "bin" / "python") in output  # the venv's agl_lab started it, not this one
    assert "--IdentityProvider.token=*** --allow-root" in output  # agl-lab's own line masks the token


def _wheel_of_this_tree(tmp_path: Path) -> Path:
    """``pip wheel`` of the files git would carry (tracked or not ignored), copied so no build/ lands in the tree."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    source = tmp_path / "source"
    for name in filter(None, files):
        path, copy = ROOT / name, source / name
        if path.is_symlink() or path.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                copy.symlink_to(os.readlink(path))
            else:
                copy.write_bytes(path.read_bytes())
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(tmp_path / "dist"), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("agl_lab-*.whl")
    return wheel


def _fresh_venv_with(wheel: Path, venv: Path) -> Path:
    """A new venv with the wheel installed, which sees this venv's packages (torch, verl, jupyterlab) through a .pth
    file: offline and in seconds, and agl_lab itself only from the wheel (a .pth line adds no editable finder)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "shared_test_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index",
         "-q", str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    origin = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import agl_lab; print(agl_lab.__file__)"],
        cwd=venv,  # not this tree: python -c finds the working directory's packages first
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    assert Path(origin).is_relative_to(site), origin
    return venv


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _when_answering(url: str, server: subprocess.Popen, log: Path, timeout_s: float = 180) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert server.poll() is None, f"agl-lab lab exited with {server.returncode}:\n{log.read_text()}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"no answer from {url} within {timeout_s} s:\n{log.read_text()}")
