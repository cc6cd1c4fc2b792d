"""The API reference (``make docs``) builds without a warning, offline, and documents every public
name with an example.

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
