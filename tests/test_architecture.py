"""The architecture holds: subpackages by stage import only downward, the batch math imports no UI, tracking or
cluster code, modules stay small, and the layout section of docs/architecture.md lists exactly the modules there are."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agl_lab"
# Each subpackage may import from itself and those listed, bottom up: files on disk (the lowest, importing nothing of
# agl_lab), the batch math, the config, batches to study and training histories (side by side: neither imports the
# other), one training run, studies over many runs and the notebooks' panels (side by side), the command line on top.
# The top-level modules (the package, exit_codes) are the command line's.
ALLOWED = {
    "core": {"core"},
    "files": {"core", "files"},  # core's constants (keys, metric names); core imports no files
    "config": {"core", "config"},
    "lab": {"files", "core", "config", "lab"},
    "curves": {"files", "core", "config", "curves"},
    "training": {"files", "core", "config", "lab", "curves", "training"},
    "studies": {"files", "core", "config", "lab", "curves", "training", "studies"},
    "ui": {"files", "core", "config", "lab", "curves", "training", "ui"},
    "cli": {"files", "core", "config", "lab", "curves", "training", "studies", "ui", "cli"},
}
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    """The modules a module imports, at any depth of the file (lazy imports included): ``import a.b`` names ``a.b``,
    ``from a.b import c`` names ``a.b`` and ``a.b.c`` (which may be a module), ``importlib.import_module("a.b")``
    (a literal) names ``a.b``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(node.args[0].value)
    return found


def imported_subpackages(path: Path) -> set[str]:
    """The agl_lab subpackages a module imports (at any depth of the file, lazy imports included)."""
    parts = (name.split(".") for name in imported_modules(path))
    return {p[1] for p in parts if p[0] == "agl_lab" and len(p) > 1 and p[1] in ALLOWED}


def module_file(name: str) -> Path | None:
    """The file of agl_lab's module ``name`` (None: not one of agl_lab's modules)."""
    path = ROOT.joinpath(*name.split("."))
    return next((p for p in (path.with_suffix(".py"), path / "__init__.py") if p.is_file()), None)


def loaded_with(name: str) -> tuple[set[str], set[str]]:
    """What importing agl_lab's module ``name`` can load, every function of it run: agl_lab's modules (its packages'
    ``__init__`` included) and the top-level packages outside agl_lab that they import."""
    modules, outside, todo = set(), set(), [name]
    while todo:
        parts = todo.pop().split(".")
        if parts[0] != "agl_lab":
            outside.add(parts[0])
            continue
        for depth in range(1, len(parts) + 1):  # a module's packages are imported before it
            prefix = ".".join(parts[:depth])
            path = module_file(prefix)
            if path is None:  # a name a module defines (from agl_lab.core.keys import DIVISOR)
                break
            if prefix not in modules:
                modules.add(prefix)
                todo.extend(imported_modules(path))
    return modules, outside - set(sys.stdlib_module_names)


# What agl_lab's recorder of Agent Lightning runs (agl_lab.training.agl_recorder) may import, every function of it run:
# packages of agl_lab's base install (tensordict comes with verl), which a user's Agent Lightning environment has;
# nothing of the lab's UI, notebook and statistics stack (the agl_lab[lab] extra), curves, studies or panels.
RECORDER_IMPORTS = {"numpy", "omegaconf", "packaging", "pandas", "pyarrow", "tensordict", "torch", "verl", "wrapt"}


def test_the_recorder_imports_only_what_the_base_install_has():
    modules, outside = loaded_with("agl_lab.training.agl_recorder")
    assert "agl_lab.training.recording" in modules and "agl_lab.core.update_cap" in modules  # its step's, lazy
    assert outside <= RECORDER_IMPORTS, f"the recorder's modules import {sorted(outside - RECORDER_IMPORTS)}"
    above = {m for m in modules if m.split(".")[1:2] in (["curves"], ["studies"], ["ui"], ["cli"])}
    assert above == set(), f"the recorder's modules import {sorted(above)}"


@pytest.mark.parametrize("path", [p for p in MODULES if p.parent != PACKAGE], ids=lambda p: str(p.relative_to(PACKAGE)))
def test_subpackages_import_only_downward(path):
    stage = path.relative_to(PACKAGE).parts[0]
    assert imported_subpackages(path) <= ALLOWED[stage], (
        f"{stage} must not import {imported_subpackages(path) - ALLOWED[stage]}"
    )


def test_the_batch_math_pulls_in_no_ui_tracking_or_cluster_code():
    # verl itself imports ray (its DataProto does): compare with what verl's parts alone bring in
    probe = """
import sys
import verl, verl.trainer.ppo.core_algos, verl.trainer.ppo.ray_trainer, verl.trainer.ppo.metric_utils
import verl.utils.torch_functional
before = set(sys.modules)
import agl_lab.core.advantage, agl_lab.core.aggregation, agl_lab.core.groups, agl_lab.core.loss
import agl_lab.core.pipeline, agl_lab.core.rows, agl_lab.core.update_cap, agl_lab.core.weights
new = set(sys.modules) - before
heavy = sorted(m for m in new if m.split(".")[0] in {"matplotlib", "ipywidgets", "wandb", "ray", "plotly", "IPython"})
above = ("lab", "training", "studies", "curves", "ui", "cli")
upper = sorted(m for m in new if m.split(".")[:2] in (["agl_lab", s] for s in above))
print(heavy, upper)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[] []"


# The standard library's modules Python 3.12 removed (PEP 594's first batch, PEP 632): Agent Lightning 1.0.2 requires
# 3.12, and the lab runs on 3.11, where they still import
REMOVED_IN_PYTHON_312 = {"distutils", "imp", "asynchat", "asyncore", "smtpd"}


def test_no_module_imports_what_python_312_removed():
    files = sorted({*MODULES, *(ROOT / "tests").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")})
    found = {path: {name.split(".")[0] for name in imported_modules(path)} & REMOVED_IN_PYTHON_312 for path in files}
    assert {str(path.relative_to(ROOT)): sorted(names) for path, names in found.items() if names} == {}


def test_no_module_is_over_300_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in MODULES}
    assert {path: n for path, n in sizes.items() if n > 300} == {}


def test_the_docs_layout_section_lists_every_module_and_nothing_else():
    # every module but the packages' __init__.py, each as `agl_lab/<path>.py`
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("## Layout", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(agl_lab/[\w/]+\.py)`", section))
    present = {str(p.relative_to(ROOT)) for p in MODULES if p.name != "__init__.py"}
    assert listed == present, (sorted(present - listed), sorted(listed - present))


def test_every_intended_difference_names_tests_that_exist():
    # docs/differences.md: each row names the test that pins it; a renamed test must not leave a dangling name
    text = (ROOT / "docs" / "differences.md").read_text()
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) >= 20
    for row in rows:
        named = re.findall(r"`(test_\w+\.py)::(\w+)`", row)
        assert named, row
        for path, name in named:
            assert f"def {name}(" in (ROOT / "tests" / path).read_text(), f"{path}::{name}"


def test_no_merge_conflict_markers_are_left_in_the_tree():
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    texts = [ROOT / p for p in tracked if p.endswith((".py", ".md", ".ipynb", ".yaml", ".toml", ".yml", "Makefile"))]
    marked = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in texts
        if path.exists()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "======="
    ]
    assert marked == []


def test_every_config_key_and_metric_name_is_spelled_in_one_module():
    # a config key or a metric name (both in agl_lab.core.keys) written out as a whole string literal
    # anywhere else is a second spelling that a rename would miss; docstrings may still name them in prose
    from agl_lab.core import keys

    owners = {
        value: keys.__name__
        for name, value in vars(keys).items()
        if name.isupper() and isinstance(value, str) and ("." in value or "/" in value)
    }
    spelled = []
    for path in MODULES:
        if path.name == "keys.py" and path.parent.name == "core":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        spelled += [
            f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r} (use {owners[node.value]})"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and id(node) not in docstrings and node.value in owners
        ]
    assert spelled == []


def test_the_three_settings_are_read_from_a_config_only_through_their_keys():
    # cfg.algorithm.enable_rollout_level_advantage or policy_loss.get("loss_mode") spells a key a second time, past
    # agl_lab.core.keys; OmegaConf.select(cfg, keys.ROLLOUT_LEVEL) does not. verl's own ActorConfig dataclass (built by
    # verl from the config) is read as verl reads it: `actor.policy_loss.loss_mode` on it is verl's field, not a key.
    from agl_lab.core import keys

    leaves = {
        key.rsplit(".", 1)[1] for key in (keys.ROLLOUT_LEVEL, keys.LOSS_MODE, keys.MAX_PPO_UPDATE_TIMES, keys.DIVISOR)
    }
    attribute_leaves = leaves - {"loss_mode"}
    spelled = []
    for path in MODULES:
        if path.name == "keys.py" and path.parent.name == "core":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in attribute_leaves:
                spelled.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "pop", "setdefault")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in leaves
            ):
                spelled.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.func.attr}({node.args[0].value!r})")
    assert spelled == []
