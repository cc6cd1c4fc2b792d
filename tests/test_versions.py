"""The versions jaxload claims are the versions it tests: pyproject.toml's floors are what
``make test-oldest`` installs (constraints-oldest.txt), jaxload's tested ranges start at them
and end at what ``make test`` installs (constraints.txt), and a TensorFlow or Grain outside the
range is warned about once, at its first use."""

from __future__ import annotations

import pathlib
import re
import sys
import types
import warnings

import pytest

import jaxload
from jaxload._src import versions

ROOT = pathlib.Path(__file__).parent.parent
FLOORED = ("jax", "jaxlib", "numpy", "tensorflow-cpu", "grain", "orbax-checkpoint")


def _floors() -> dict[str, str]:
    """Every ``name>=version`` among pyproject.toml's dependencies and extras."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [
        r for extra in project["optional-dependencies"].values() for r in extra]
    floors: dict[str, str] = {}
    for requirement in requirements:
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?>=([0-9][^,;\s]*)", requirement)
        if found:
            assert floors.setdefault(found[1], found[3]) == found[3], (
                f"{found[1]} has two floors in pyproject.toml: {floors[found[1]]} and {found[3]}")
    return floors


def _pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / name).read_text().splitlines():
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.split("#")[0].strip())
        if found:
            pins[found[1]] = found[2]
    return pins


def test_make_test_oldest_installs_exactly_pyprojects_floors():
    floors, pins = _floors(), _pins("constraints-oldest.txt")
    for name in FLOORED:
        assert name in floors, f"pyproject.toml gives {name} no floor (>=)"
        assert pins.get(name) == floors[name], (
            f"pyproject.toml says {name}>={floors[name]}, but make test-oldest installs "
            f"{name}=={pins.get(name)} (constraints-oldest.txt)")


def test_the_tested_ranges_run_from_the_floors_to_what_make_test_installs():
    floors, newest = _floors(), _pins("constraints.txt")
    for module, package in [("tensorflow", "tensorflow-cpu"), ("grain", "grain")]:
        low, high = versions.TESTED[module]
        assert low == floors[package], (module, low, floors[package])
        assert versions.release(newest[package])[:len(versions.release(high))] == (
            versions.release(high)), f"make test installs {package}=={newest[package]}, not {high}"


@pytest.mark.parametrize("version,tested,expected", [
    ("2.18.1", versions.TESTED_TF, True), ("2.21.0", versions.TESTED_TF, True),
    ("2.21.7", versions.TESTED_TF, True), ("2.20.0rc1", versions.TESTED_TF, True),
    ("2.18.0", versions.TESTED_TF, False), ("2.17.1", versions.TESTED_TF, False),
    ("2.22.0", versions.TESTED_TF, False), ("3.0", versions.TESTED_TF, False),
    ("0.2.12", versions.TESTED_GRAIN, True), ("0.2.18", versions.TESTED_GRAIN, True),
    ("0.2.11", versions.TESTED_GRAIN, False), ("0.2.19", versions.TESTED_GRAIN, False),
    ("0.3.0", versions.TESTED_GRAIN, False), ("unknown", versions.TESTED_GRAIN, False),
])
def test_in_range(version, tested, expected):
    assert versions.in_range(version, tested) is expected


@pytest.fixture
def fresh_check():
    versions.check.cache_clear()
    yield versions.check
    versions.check.cache_clear()


def test_a_version_outside_the_range_is_warned_about_once(monkeypatch, fresh_check):
    monkeypatch.setitem(sys.modules, "grain", types.SimpleNamespace(__version__="0.2.11"))
    with pytest.warns(UserWarning) as caught:
        fresh_check("grain")
        fresh_check("grain")
    assert [str(w.message) for w in caught] == [
        "grain 0.2.11 is outside the range jaxload is tested with (grain 0.2.12 to 0.2.18); "
        "jaxload runs, but its grain support is untested there"]


def test_a_tested_version_or_no_backend_is_not_warned_about(monkeypatch, fresh_check):
    monkeypatch.setitem(sys.modules, "tensorflow", types.SimpleNamespace(__version__="2.20.0"))
    monkeypatch.delitem(sys.modules, "grain", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh_check("tensorflow")
        fresh_check("grain")


def test_from_grain_warns_where_grain_is_untested(monkeypatch, fresh_check):
    grain = pytest.importorskip("grain")
    monkeypatch.setattr(grain, "__version__", "0.9.0")
    with pytest.warns(UserWarning, match=r"grain 0\.9\.0 is outside the range .*0\.2\.12 to"):
        jaxload.from_grain(grain.MapDataset.range(16), jaxload.data_parallel(),
                           global_batch_size=8)


def test_from_tf_data_warns_where_tensorflow_is_untested(monkeypatch, fresh_check):
    tf = pytest.importorskip("tensorflow")
    monkeypatch.setattr(tf, "__version__", "2.17.1")
    with pytest.warns(UserWarning, match=r"tensorflow 2\.17\.1 is outside the range .*2\.18\.1"):
        jaxload.from_tf_data(tf.data.Dataset.range(16), jaxload.data_parallel(),
                             global_batch_size=8)
