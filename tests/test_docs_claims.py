"""What README.md and docs/ quote from the code: its error messages and the versions it is
tested with. A message quoted in a guide must be one the code can raise (found among the
package's string templates), and a version must be one that constraints*.txt or pyproject pin."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
HOLE = None  # a placeholder in a template: a formatted value


def templates() -> list[list[str | None]]:
    """Every string of the package as literal parts and holes (an f-string's values)."""
    found = []
    for path in (ROOT / "jaxload").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):
                found.append([v.value if isinstance(v, ast.Constant) else HOLE
                              for v in node.values])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append([node.value])
    return [t for t in found if sum(len(p) for p in t if p) >= 12]


def fits(message: str, template: list[str | None]) -> bool:
    """Whether ``message`` reads as ``template`` with its holes filled (a hole also takes a
    guide's own placeholder, ``...`` or ``N``), from the template's start or from inside one of
    its literal parts (the code may put context before the message). The guide may stop early
    (after at least 15 of the template's characters) and the code may join more text after it
    (after at least 30)."""
    message = " ".join(message.split()).rstrip(". ").removesuffix("...").rstrip()
    message = message.removeprefix("... ")
    if _reads_as(message, template):
        return True
    anchor = message[:15]
    for k, part in enumerate(template):
        if part is not HOLE and len(anchor) == 15 and anchor in part:
            if _reads_as(message, [part[part.index(anchor):], *template[k + 1:]]):
                return True
    return False


HOLE_CHARS = 40  # a value the code fills in is at most this long, unless it ends the string


def _reads_as(message: str, template: list[str | None]) -> bool:
    tokens = [c for part in template for c in (part if part is not HOLE else [HOLE])]
    literal = [0]
    for token in tokens:
        literal.append(literal[-1] + (token is not HOLE))
    last = len(tokens) - 1
    reachable = {(0, 0)}  # (token, characters taken by the hole at that token so far)
    for char in message:
        after = set()
        for j, taken in reachable:
            if j == len(tokens):
                if literal[j] >= 30:  # the code joins more text after this string
                    return True
            elif tokens[j] is HOLE:
                if taken < HOLE_CHARS or j == last:
                    after.add((j, taken + 1))
                after.add((j + 1, 0))
            elif tokens[j] == char:
                after.add((j + 1, 0))
        if not after:
            return False
        reachable = after

    def ends_well(j: int) -> bool:
        if j == len(tokens) and tokens[j - 1] is not HOLE:
            return True
        if j == len(tokens) or tokens[j] is HOLE or tokens[j - 1] is HOLE:  # stops at a value
            return literal[j] >= 25
        return literal[j] >= min(15, literal[-1])  # the guide stops inside the text

    return any(ends_well(j) for j, _ in reachable)


FENCED = re.compile(r"```[a-z]*\n(.*?)```", re.S)
RAISED = re.compile(r"^(?:\[\d+\] )?(?:[\w.]+\.)?(\w+(?:Error|Warning)): (.{25,})$", re.M)
BOLD_CODE = re.compile(r"\*\*`([^`]{25,})`")


def quoted_messages() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        text, name = page.read_text(), page.relative_to(ROOT).as_posix()
        for block in FENCED.findall(text):
            out += [(name, m.group(2)) for m in RAISED.finditer(block)
                    if m.group(1) not in ("JaxRuntimeError", "XlaRuntimeError")]
        out += [(name, m.group(1).split(": ", 1)[-1]) for m in BOLD_CODE.finditer(text)]
        if page.name == "guarantees.md":  # its quoted refusals are code spans
            spans = [m.group(1) for m in re.finditer(r"`([^`\n]+)`", text)]
            out += [(name, span) for span in spans if len(span) >= 25]
    return out


QUOTED = quoted_messages()


def test_the_guides_quote_messages():
    assert len(QUOTED) >= 5, QUOTED  # the extraction itself still finds them


@pytest.fixture(scope="module")
def known() -> list[list[str | None]]:
    return templates()


FOREIGN = ("jax.distributed.initialize() must be called before any JAX",  # JAX's own messages
           "... unexpectedly tried to connect with a different incarnation",
           "Use .at[...].get(out_sharding=)", "Terminating process because the JAX distributed",
           "Contracting dimensions are sharded and it is ambiguous")


OURS = [q for q in QUOTED if not q[1].startswith(FOREIGN)]


@pytest.mark.parametrize(("page", "message"), OURS, ids=lambda v: str(v)[:40])
def test_a_quoted_message_is_one_the_code_raises(page, message, known):
    assert any(fits(message, t) for t in known), (
        f"{page} quotes a message no string of jaxload's source reads as: {message!r}")


def test_fits():
    template = ["global_batch_size=", HOLE, " is not a multiple of the ", HOLE, " batch shards"]
    assert fits("global_batch_size=... is not a multiple of the N batch shards", template)
    assert fits("global_batch_size=100 is not a multiple of the 8 batch", template)
    assert not fits("global_batch_size=100 is a multiple of the 8 batch shards", template)
    assert not fits("something else entirely", template)
    assert fits("... is not a multiple of the 8 batch shards", template)
    assert not fits("... is not a divisor of the 8 batch shards", template)
    assert not fits("global_batch_size=... is not a divisor of the N batch shards", template)


PINS = {}
for constraints in ("constraints.txt", "constraints-oldest.txt"):
    for line in (ROOT / constraints).read_text().splitlines():
        if "==" in line:
            package, version = line.split("==")
            PINS.setdefault(package.strip().lower(), set()).add(version.strip())
NAMES = {"jax": "jax", "jaxlib": "jaxlib", "tensorflow": "tensorflow-cpu",
         "tensorflow-cpu": "tensorflow-cpu", "grain": "grain", "orbax-checkpoint": "orbax-checkpoint",
         "numpy": "numpy"}
VERSION = re.compile(r"\b(JAX|jaxlib|TensorFlow|tensorflow-cpu|Grain|grain|orbax-checkpoint|numpy|"
                     r"Python) \(?(>= ?)?(\d+\.\d+(?:\.\d+)*)")


def test_quoted_versions_are_the_pinned_ones():
    lowest_python = re.search(r'requires-python = ">=(\d+\.\d+)"',
                              (ROOT / "pyproject.toml").read_text()).group(1)
    wrong = []
    for page in PAGES:
        for m in VERSION.finditer(page.read_text()):
            name, version = m.group(1), m.group(3)
            if name == "Python":
                ok = tuple(map(int, version.split("."))) >= tuple(map(int, lowest_python.split(".")))
            else:
                pins = PINS[NAMES[name.lower()]]
                ok = version in pins if version.count(".") >= 2 else any(
                    p == version or p.startswith(version + ".") for p in pins)
            if not ok:
                wrong.append(f"{page.relative_to(ROOT)}: {m.group(0)}")
    assert not wrong, f"versions that no constraints file pins: {wrong}"


def test_the_reference_pages_list_their_names_as_the_docstrings_say():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import reference_summary
    finally:
        sys.path.pop(0)
    stale = [p.name for p in sorted((ROOT / "docs" / "reference").glob("*.md"))
             if reference_summary.updated(p.read_text()) != p.read_text()]
    assert not stale, (f"run tools/reference_summary.py: the lists at the top of {stale} differ "
                       "from the docstrings")
