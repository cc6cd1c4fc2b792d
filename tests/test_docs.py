"""The docs: README.md and the pages under docs/ (the guides), and the site ``make docs`` builds.

Every Python block of README.md and docs/ runs (or, marked ``<!-- fragment -->``, compiles),
every relative link resolves, the README stays short, and the site builds without a warning,
offline, documenting every public name with an example.

The examples themselves run with ``pytest --doctest-modules jaxload`` (``make doctest``); those
that doctest does not find (an attribute's docstring) run here. The tests that build the site or
read the package with griffe (which asks git about the files) start processes, hence
``@pytest.mark.cluster``.
"""

from __future__ import annotations

import argparse
import doctest
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxload

ROOT = Path(__file__).resolve().parent.parent
PUBLIC_MODULES = ("check", "checkpoint", "testing", "cli", "metrics")  # documented whole, besides __all__
HEADING = re.compile(r'<h([1-6]) id="([^"]+)" class="doc doc-heading">(.*?)</h\1>', re.S)


def _docs_tools():
    for module in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python", "material", "griffe"):
        pytest.importorskip(module, reason="the docs extra is not installed (pip install .[docs])")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, str, int]:
    """The reference built into a temporary directory, the build's output and exit code."""
    _docs_tools()
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's notice about MkDocs 2
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return out, done.stdout + done.stderr, done.returncode


def _headings(site_dir: Path) -> dict[str, tuple[str, bool]]:
    """Every documented object's anchor -> (heading text, whether a signature follows)."""
    found = {}
    for page in site_dir.rglob("*.html"):
        html = page.read_text()
        for m in HEADING.finditer(html):
            text = re.sub(r"<[^>]+>|&para;|\s+", " ", m.group(3)).split()
            signed = "doc-signature" in html[m.end():m.end() + 500]
            found[m.group(2)] = (text[0] if text else "", signed)
    return found


@pytest.mark.cluster
def test_build_is_strict_clean_and_offline(site):
    site_dir, output, returncode = site
    assert returncode == 0, output[-5000:]
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert not warnings, "\n".join(warnings)
    assert (site_dir / "index.html").exists() and (site_dir / "reference" / "loading.html").exists()
    for page in site_dir.rglob("*.html"):
        html = page.read_text()
        # opens from file:// (no directory URLs) and loads nothing from the network
        assert not re.findall(r'<(?:script|img)[^>]*\bsrc="https?://', html), page
        assert not re.findall(r'<link[^>]*\bhref="https?://', html), page
        assert "fonts.googleapis" not in html, page


@pytest.mark.cluster
def test_every_public_name_is_in_the_reference(site):
    site_dir, output, returncode = site
    assert returncode == 0, output[-5000:]
    headings = _headings(site_dir)
    texts = dict(headings.values())  # heading text -> whether a signature follows
    for name in jaxload.__all__:
        full = f"jaxload.{name}"
        assert full in texts, f"{full} has no heading in the reference"
        obj = getattr(jaxload, name)
        if inspect.isfunction(obj) or (inspect.isclass(obj) and "__init__" in vars(obj)):
            assert texts[full], f"{full} is shown without its signature"
    for module in PUBLIC_MODULES:
        for name, _ in _public_members(module):
            assert f"jaxload.{module}.{name}" in headings, f"jaxload.{module}.{name} is missing"


def _public_members(module: str) -> list[tuple[str, object]]:
    """The public functions and classes defined in ``jaxload.<module>``."""
    mod = __import__(f"jaxload.{module}", fromlist=["_"])
    return [(name, obj) for name, obj in vars(mod).items()
            if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj))
            and obj.__module__ == mod.__name__]


def _griffe_docstrings() -> dict[str, str]:
    """The docstring of every public name, as the reference sees it (attributes included)."""
    import griffe

    package = griffe.load("jaxload", search_paths=[str(ROOT)], docstring_parser="google")
    paths = list(jaxload.__all__)
    for module in PUBLIC_MODULES:
        paths += [f"{module}.{name}" for name, _ in _public_members(module)]
    docs = {}
    for path in paths:
        obj = package[path]
        docs[f"jaxload.{path}"] = obj.docstring.value if obj.docstring else ""
    return docs


@pytest.mark.cluster
def test_every_public_name_has_an_example():
    _docs_tools()
    missing = [name for name, doc in _griffe_docstrings().items() if ">>>" not in doc]
    assert not missing, f"docstrings without a >>> example: {missing}"


@pytest.mark.cluster
def test_attribute_examples_run():
    """Doctest finds no attribute's docstring (``REMAINDER_MODES``); they run here."""
    _docs_tools()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    ran = 0
    for name, doc in _griffe_docstrings().items():
        value = jaxload
        for part in name.split(".")[1:]:
            value = getattr(value, part)
        if ">>>" in doc and not (inspect.ismodule(value) or callable(value)):
            globs = {"jax": jax, "jaxload": jaxload, "np": np}
            runner.run(doctest.DocTestParser().get_doctest(doc, globs, name, None, 0))
            ran += 1
    assert ran >= 1
    assert runner.failures == 0


def test_cli_page_lists_every_option():
    from jaxload import cli

    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    commands = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, sub in commands.choices.items():
        assert f"`jaxload {command}`" in page
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in page, f"jaxload {command} {option} is not in cli.md"


# --- the pages: README.md, the guides and the other Markdown files of the repository -------------

PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md"),
                *(ROOT / "benchmarks").glob("*.md")])
GUIDES = [p for p in PAGES if p.name != "CHANGELOG.md" and "benchmarks" not in p.parts]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"<!-- (fragment|run: launch -n (\d+) --local-devices (\d+)) -->\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
LAB_NOTES = re.compile(r"used to|earlier versions|this is a change|before this change|no gpu|2-core",
                       re.I)


def _python_blocks() -> list[tuple[str, int, str, str]]:
    """(page, line, how it is tested, code) of every Python block of the guides."""
    blocks = []
    for page in GUIDES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            if m.group(1) != "python":
                continue
            before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = MARK.search(before)
            code = m.group(2)
            if mark and mark.group(1) == "fragment":
                how = "fragment"
            elif mark:
                how = f"launch {mark.group(2)} {mark.group(3)}"
            elif code.lstrip().startswith(">>>"):
                how = "doctest"
            else:
                how = "python"
            line = text[:m.start()].count("\n") + 1
            blocks.append((str(page.relative_to(ROOT)), line, how, code))
    return blocks


BLOCKS = _python_blocks()


def test_readme_is_short_and_starts_with_install_and_code():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/guides/"
    head = "\n".join(lines[:80])
    assert 'pip install "jaxload[tf]"' in head and "```python" in head


def test_the_readme_quick_start_is_the_example_the_install_test_runs():
    """`make test-install` runs examples/quickstart.py from a built wheel: it is the README's."""
    script = (ROOT / "examples" / "quickstart.py").read_text()
    assert f"```python\n{script}```" in (ROOT / "README.md").read_text()


def test_the_pages_tell_no_history():
    """What changed, and measurements' circumstances, belong in CHANGELOG.md and benchmarks/."""
    found = [f"{page.relative_to(ROOT)}:{i + 1}: {line.strip()}" for page in GUIDES
             for i, line in enumerate(page.read_text().splitlines()) if LAB_NOTES.search(line)]
    assert not found, "\n".join(found)


def _anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings, as GitHub and mkdocs' toc both make them."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M):
        text = re.sub(r"[`*]|<[^>]+>", "", heading).strip().lower()
        anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # https://, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or ROOT not in file.parents:
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_every_python_block_is_tested():
    assert len(BLOCKS) >= 20
    assert {how for _, _, how, _ in BLOCKS} >= {"fragment", "doctest", "launch 2 4", "python"}


@pytest.mark.parametrize("page,line,how,code", [b for b in BLOCKS if b[2] == "fragment"],
                         ids=lambda v: str(v) if not isinstance(v, str) or "\n" not in v else "")
def test_fragments_compile(page, line, how, code):
    compile(code, f"{page}:{line}", "exec")


@pytest.mark.parametrize("page,line,how,code", [b for b in BLOCKS if b[2] == "doctest"],
                         ids=lambda v: str(v) if not isinstance(v, str) or "\n" not in v else "")
def test_doctest_blocks_run(page, line, how, code):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    globs = {"jax": jax, "jaxload": jaxload, "np": np}
    runner.run(doctest.DocTestParser().get_doctest(code, globs, f"{page}:{line}", page, line))
    assert runner.failures == 0


@pytest.mark.cluster
@pytest.mark.parametrize("page,line,how,code",
                         [b for b in BLOCKS if b[2] not in ("fragment", "doctest")],
                         ids=lambda v: str(v) if not isinstance(v, str) or "\n" not in v else "")
def test_script_blocks_run(page, line, how, code, tmp_path):
    """A script block runs as written: under ``jaxload launch`` where it is marked so, otherwise
    in a fresh Python process (8 fake CPU devices)."""
    script = tmp_path / "block.py"
    script.write_text(code)
    if how.startswith("launch"):
        _, n, d = how.split()
        argv = [sys.executable, "-m", "jaxload", "launch", "-n", n, "--local-devices", d, "--",
                sys.executable, str(script)]
    else:
        argv = [sys.executable, str(script)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{page}:{line}\n" + done.stdout[-3000:] + done.stderr[-3000:]
