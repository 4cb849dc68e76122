"""The docs: README.md is a landing page that fits a screen, and the rest is a MkDocs site (mkdocs.yml, docs/) that
builds with ``--strict``, so a broken link or anchor, a page left out of the nav, a snippet of the README that is gone
or an API page whose module moved fails here (and so in ``make test``, what CI runs) rather than on a reader."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md"))
# [text](target) and ![alt](target), the target up to a space, a title or the closing parenthesis
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"$', re.MULTILINE)


def relative_links(path: Path) -> list[str]:
    """The targets of the Markdown links of a page that point into the repository (no scheme, no bare anchor)."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)  # a code block's brackets are code
    text = re.sub(r"`[^`\n]*`", "", text)  # and so are a code span's
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z+.-]*:", t) and not t.startswith("#")]


def test_the_site_builds_strictly_without_a_warning(tmp_path):
    # the API pages read the package's source (griffe, nothing imported), the notebooks are rendered as committed
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=900,
    )  # fmt: skip
    output = out.stdout + out.stderr
    assert out.returncode == 0, output[-6000:]
    assert not [line for line in output.splitlines() if "WARNING" in line or "ERROR" in line], output[-6000:]
    site = tmp_path / "site"
    for page in PAGES:  # every page of docs/ became a page of the site
        assert (site / ("" if page.stem == "index" else page.stem) / "index.html").is_file(), page.name
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks and all((site / "notebooks" / name / "index.html").is_file() for name in notebooks)
    home = (site / "index.html").read_text()
    assert "both_on_cap2" in home and "make demo" in home  # the README's two commands and demo table, included


@pytest.mark.parametrize("path", [ROOT / "README.md", *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_that_exists(path):
    links = relative_links(path)
    missing = [t for t in links if not (path.parent / t.split("#", 1)[0]).exists()]
    assert missing == [], f"{path.relative_to(ROOT)} links to what is not there: {missing}"


def test_the_readme_fits_a_screen_and_links_every_page_of_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200  # a landing page; the rest lives under docs/
    assert "make demo   #" in readme and "make test   #" in readme  # the two commands, as the Makefile names them
    linked = {t.split("#", 1)[0] for t in relative_links(ROOT / "README.md")}
    pages = {f"docs/{p.name}" for p in PAGES if p.name != "index.md"}  # index.md is the site's copy of the README
    assert sorted(pages - linked) == []


def test_every_snippet_of_the_readme_the_docs_include_is_marked_once():
    # docs pages include README sections (`--8<-- "README.md:name"`): each name marked once at each end
    readme = (ROOT / "README.md").read_text()
    included = [m for page in PAGES for m in SNIPPET.findall(page.read_text())]
    assert included
    for file, name in included:
        assert file == "README.md" and name, (file, name)
        for end in ("start", "end"):
            assert readme.count(f"<!-- --8<-- [{end}:{name}] -->") == 1, (end, name)


def test_every_subpackage_has_its_api_page_and_every_api_page_a_subpackage():
    packages = {p.parent.name for p in (ROOT / "agl_lab").glob("*/__init__.py")}
    pages = {p.stem: p.read_text() for p in (ROOT / "docs" / "api").glob("*.md")}
    assert set(pages) == packages
    for name, text in pages.items():
        assert f"::: agl_lab.{name}\n" in text, name
    nav = (ROOT / "mkdocs.yml").read_text()
    assert all(f"api/{name}.md" in nav for name in packages)


def test_the_feasibility_rates_the_config_page_states_are_the_modules():
    # the page writes `NAME = value` for agl_lab/config/feasibility.py's assumed rates; the module's source is read
    # (nothing imported) so the docs tests load neither verl nor torch
    source = (ROOT / "agl_lab" / "config" / "feasibility.py").read_text()
    module = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("CPU_FLOPS", "GPU_FLOPS")
    }  # fmt: skip
    page = (ROOT / "docs" / "config.md").read_text()
    stated = {name: float(value) for name, value in re.findall(r"`(CPU_FLOPS|GPU_FLOPS) = ([0-9.e+]+)`", page)}
    assert set(module) == {"CPU_FLOPS", "GPU_FLOPS"} and stated == module
