"""The recipes (examples/recipes/) run as their docstrings say and print the output they end
with: each starts with what it is for ("Recipe: ...") and ends with "# Output" lines, each of
which must appear in the real output of the command its docstring gives."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_examples import launch_example

ROOT = Path(__file__).parent.parent
RECIPES = ROOT / "examples" / "recipes"
LAUNCH = re.compile(r"jaxload launch -n (\d+) --local-devices (\d+) -- python "
                    r"examples/recipes/(\S+\.py)(.*)")
SCRIPTS = sorted(p.name for p in RECIPES.glob("*.py") if p.name != "recipe_data.py")


def expected_output(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# Output"))
    return [line[2:] for line in lines[start + 1:] if line.startswith("# ")]


def launch(processes: str, devices: str, script: str, *args: str) -> str:
    return launch_example(f"recipes/{script}", int(processes), int(devices), *args)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_recipe_says_what_it_is_for_and_what_it_prints(script):
    path = RECIPES / script
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert doc.startswith("Recipe: "), f"{script}: its docstring starts with 'Recipe: ...'"
    assert expected_output(path), f"{script} ends with its output ('# Output ...' lines)"
    assert f"examples/recipes/{script}" in doc, f"{script}: its docstring says how to run it"


SINGLE = [s for s in SCRIPTS if not s.startswith("test_") and s != "orbax_elastic_resume.py"]


@pytest.mark.cluster
@pytest.mark.parametrize("script", SINGLE)
def test_recipe_prints_its_output(script):
    path = RECIPES / script
    processes, devices, named, args = LAUNCH.search(path.read_text()).groups()
    assert named == script
    out = launch(processes, devices, script, *args.split())
    for line in expected_output(path):
        assert line in out, f"{line!r} not in the output of {script}:\n{out[-3000:]}"


@pytest.mark.cluster
def test_pytest_recipe_passes():
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "examples/recipes/test_training_step.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for line in expected_output(RECIPES / "test_training_step.py"):
        assert line in done.stdout


@pytest.mark.cluster
def test_elastic_resume_recipe_continues_on_4_processes_what_2_saved(tmp_path):
    out = launch("2", "4", "orbax_elastic_resume.py", "A", str(tmp_path))
    out += launch("4", "2", "orbax_elastic_resume.py", "B", str(tmp_path))
    for line in expected_output(RECIPES / "orbax_elastic_resume.py"):
        assert line in out, f"{line!r} not in:\n{out[-3000:]}"
