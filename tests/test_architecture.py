"""The package's structural rules, read from its sources with ``ast`` (without importing it).

- modules and functions stay short enough to read whole;
- no import cycle among jaxload's modules, imports inside functions and under
  ``if TYPE_CHECKING:`` included (a circle of types is a circle of design all the same);
- the data flows one way: the public modules (``jaxload``, ``jaxload.check``, ...) re-export
  from ``jaxload._src``, which never imports them;
- only ``jaxload/_src/compat/`` reads private attributes of JAX, Grain, TensorFlow or Orbax,
  so that ``tests/test_compat.py`` (which checks that they still exist) sees every one of them.

Each rule's checker is a function of source text, tested on small examples below.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jaxload"
PRIVATE_LAYER = "jaxload._src"
COMPAT = "jaxload._src.compat"

MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60  # from the ``def`` line to the last, its docstring left out

# Allowed past a limit, each with why. Empty: every module and function fits.
LONG_MODULES: dict[str, str] = {}
LONG_FUNCTIONS: dict[str, str] = {}  # "jaxload/_src/x.py:Class.method" -> why

# The backends whose private attributes only the compat package may read.
THIRD_PARTY = frozenset({"jax", "jaxlib", "grain", "tensorflow", "orbax"})


@dataclass(frozen=True)
class Module:
    name: str  # dotted: jaxload._src.assemble
    path: str  # relative to the repository: jaxload/_src/assemble.py
    source: str

    @property
    def is_package(self) -> bool:
        return self.path.endswith("__init__.py")


def package_modules() -> list[Module]:
    modules = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules.append(Module(name, path.relative_to(ROOT).as_posix(), path.read_text()))
    return modules


def _offenders(message: str, offenders: list[str]) -> str:
    return f"{message}:\n  " + "\n  ".join(offenders)


# --- sizes -------------------------------------------------------------------------------------


def _docstring_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = node.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return (first.end_lineno or first.lineno) - first.lineno + 1
    return 0


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """``(qualified name, lines)`` of each function or method longer than ``limit`` lines.

    A public function's docstring (with its example) is as long as it needs to be: its lines
    are not counted.
    """
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    lines = ((child.end_lineno or child.lineno) - child.lineno + 1
                             - _docstring_lines(child))
                    if lines > limit:
                        found.append((name, lines))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_modules_are_short():
    offenders = [f"{m.path}: {n} lines" for m in package_modules()
                 if (n := len(m.source.splitlines())) > MAX_MODULE_LINES
                 and m.path not in LONG_MODULES]
    assert not offenders, _offenders(f"modules longer than {MAX_MODULE_LINES} lines", offenders)


def test_functions_are_short():
    offenders = [f"{m.path}:{name}: {n} lines" for m in package_modules()
                 for name, n in long_functions(m.source)
                 if f"{m.path}:{name}" not in LONG_FUNCTIONS]
    assert not offenders, _offenders(f"functions longer than {MAX_FUNCTION_LINES} lines "
                                     "(def line to last line, docstring left out)", offenders)


def test_the_exceptions_still_exist():
    """An exception for a module or function that is short now (or gone) is removed."""
    modules = {m.path: m for m in package_modules()}
    stale = [path for path in LONG_MODULES
             if path not in modules or len(modules[path].source.splitlines()) <= MAX_MODULE_LINES]
    long = {f"{m.path}:{name}" for m in modules.values() for name, _ in long_functions(m.source)}
    stale += [name for name in LONG_FUNCTIONS if name not in long]
    assert not stale, _offenders("exceptions no longer needed", stale)


_SIZED = '''
def short():
    return 1


class A:
    def long(self):
        """A docstring,

        not counted.
        """
{body}
        return 2
'''


@pytest.mark.parametrize("body_lines, flagged", [(3, []), (4, [("A.long", 6)])])
def test_long_functions_are_measured_from_def_to_last_line_without_docstring(body_lines,
                                                                              flagged):
    source = _SIZED.format(body="\n".join(["        x = 1"] * body_lines))
    assert long_functions(source, limit=5) == flagged


# --- imports -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    target: str  # the jaxload module imported
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``: no import at run time


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node below ``node``, and whether it is under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        yield child, type_only
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for part in child.body:
                yield part, True
                yield from _walk(part, True)
            for part in child.orelse:
                yield part, type_only
                yield from _walk(part, type_only)
        else:
            yield from _walk(child, type_only)


def _known(name: str, known: set[str]) -> str | None:
    """The longest prefix of the dotted ``name`` that is a jaxload module."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return None


def _from_base(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _targets(module: Module, node: ast.AST, known: set[str]) -> list[str | None]:
    if isinstance(node, ast.Import):
        return [_known(alias.name, known) for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = _from_base(module, node)
        # ``from pkg import name``: the submodule pkg.name where there is one, else pkg
        submodules = [f"{base}.{alias.name}" for alias in node.names]
        return [name if name in known else _known(base, known) for name in submodules]
    if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module",
                                           "__import__")):
        return [_known(node.args[0].value, known)]
    return []


def imports(module: Module, known: set[str]) -> list[Import]:
    """The jaxload modules ``module`` imports, wherever the import is (functions included).

    The parent packages Python imports first are not counted: ``import jaxload._src.x`` is an
    edge to ``jaxload._src.x`` only.
    """
    found = []
    for node, type_only in _walk(ast.parse(module.source)):
        for target in _targets(module, node, known):
            if target is not None:
                found.append(Import(target, getattr(node, "lineno", 0), type_only))
    return found


def import_graph(modules: list[Module], types: bool = True) -> dict[str, set[str]]:
    """Each module's imports of jaxload's modules: all of them, or with ``types=False`` only
    those made at run time (the ``if TYPE_CHECKING:`` ones left out)."""
    known = {m.name for m in modules}
    return {m.name: {i.target for i in imports(m, known) if types or not i.type_only}
            for m in modules}


def type_only_edges(modules: list[Module]) -> set[tuple[str, str]]:
    """``(importer, imported)`` where every import of ``imported`` is under ``if TYPE_CHECKING:``."""
    everything, at_run_time = import_graph(modules), import_graph(modules, types=False)
    return {(m, t) for m, targets in everything.items() for t in targets - at_run_time[m]}


def tangles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components that hold a cycle: modules that import each other,
    directly or not."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            components.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted((c for c in components
                   if len(c) > 1 or next(iter(c)) in graph.get(next(iter(c)), ())), key=min)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per tangle."""
    return [_cycle_in(graph, tangle) for tangle in tangles(graph)]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """The shortest cycle through the component's first module, by breadth-first search."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        reached = []
        for node in frontier:
            for successor in sorted(graph.get(node, set()) & component):
                if successor == start:
                    return paths[node] + [start]
                if successor not in paths:
                    paths[successor] = paths[node] + [successor]
                    reached.append(successor)
        frontier = reached
    raise AssertionError(f"no cycle in the strongly connected component {component}")


def describe_cycles(modules: list[Module]) -> list[str]:
    """One line per tangle: a cycle, each arrow that only ``if TYPE_CHECKING:`` imports drawn
    ``-(types)->``."""
    graph, for_types = import_graph(modules), type_only_edges(modules)
    found = []
    for tangle in tangles(graph):
        cycle = _cycle_in(graph, tangle)
        line = cycle[0] + "".join(
            f" {'-(types)->' if (a, b) in for_types else '->'} {b}"
            for a, b in zip(cycle, cycle[1:], strict=False))
        more = f" (all of {sorted(tangle)} import each other)" if len(tangle) >= len(cycle) else ""
        found.append(line + more)
    return found


def test_no_import_cycles():
    found = describe_cycles(package_modules())
    assert not found, _offenders(
        "import cycles among jaxload's modules (imports inside functions and under "
        "`if TYPE_CHECKING:` included; give the types one side needs a lower module of their "
        "own, e.g. a Protocol or a dataclass)", found)


def _in_private_layer(name: str) -> bool:
    return name == PRIVATE_LAYER or name.startswith(PRIVATE_LAYER + ".")


def public_imports(modules: list[Module]) -> list[str]:
    """Each import of a public module by a module of the private layer (also for types)."""
    known = {m.name for m in modules}
    return [f"{m.path}:{i.line}: imports {i.target}" for m in modules if _in_private_layer(m.name)
            for i in imports(m, known) if not _in_private_layer(i.target)]


def test_the_private_layer_never_imports_the_public_modules():
    offenders = public_imports(package_modules())
    assert not offenders, _offenders(
        "jaxload._src imports the public layer (which re-exports from it: the data flows one "
        "way); import the name from its module under jaxload._src", offenders)


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"a"}}, [["a", "b", "a"]]),
    ({"a": {"a"}}, [["a", "a"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c", "a"]]),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}, "e": {"a", "c"}},
     [["a", "b", "a"], ["c", "d", "c"]]),
    ({"a": {"b", "c"}, "b": {"d"}, "c": {"a"}, "d": {"b"}}, [["a", "c", "a"], ["b", "d", "b"]]),
])
def test_cycles_are_found(graph, expected):
    assert cycles(graph) == expected


_KNOWN = {"jaxload", "jaxload.check", "jaxload._src", "jaxload._src.x", "jaxload._src.y",
          "jaxload._src.sub", "jaxload._src.sub.z"}


@pytest.mark.parametrize("source, targets", [
    ("import jaxload._src.x", ["jaxload._src.x"]),
    ("import jaxload._src.x as x", ["jaxload._src.x"]),
    ("import jaxload", ["jaxload"]),
    ("from jaxload._src import x, y", ["jaxload._src.x", "jaxload._src.y"]),
    ("from jaxload._src.x import name", ["jaxload._src.x"]),
    ("from jaxload._src import name", ["jaxload._src"]),
    ("from jaxload import check", ["jaxload.check"]),
    ("from jaxload.check import batch", ["jaxload.check"]),
    ("from . import x", ["jaxload._src.x"]),
    ("from .sub import z", ["jaxload._src.sub.z"]),
    ("from .sub.z import name", ["jaxload._src.sub.z"]),
    ("from .. import check", ["jaxload.check"]),
    ("def f():\n    from jaxload._src import x", ["jaxload._src.x"]),
    ("class C:\n    def f(self):\n        import jaxload._src.y", ["jaxload._src.y"]),
    ("importlib.import_module('jaxload.check')", ["jaxload.check"]),
    ("import numpy\nfrom jax import numpy as jnp", []),
])
def test_imports_are_resolved(source, targets):
    module = Module("jaxload._src.y", "jaxload/_src/y.py", source)
    assert [i.target for i in imports(module, _KNOWN)] == targets


def test_imports_of_the_public_layer_are_found():
    modules = [Module("jaxload", "jaxload/__init__.py", "from jaxload._src import x"),
               Module("jaxload._src", "jaxload/_src/__init__.py", ""),
               Module("jaxload._src.x", "jaxload/_src/x.py", "from jaxload._src import y"),
               Module("jaxload._src.y", "jaxload/_src/y.py",
                      "import jaxload._src\ndef f():\n    import jaxload\n")]
    assert public_imports(modules) == ["jaxload/_src/y.py:3: imports jaxload"]


def test_type_checking_imports_are_marked_and_make_cycles_too():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jaxload._src import x\n"
    modules = [Module("jaxload._src.y", "jaxload/_src/y.py", source),
               Module("jaxload._src.x", "jaxload/_src/x.py", "from jaxload._src import y\n")]
    assert imports(modules[0], _KNOWN) == [Import("jaxload._src.x", 3, True)]
    assert cycles(import_graph(modules, types=False)) == []
    assert cycles(import_graph(modules)) == [
        ["jaxload._src.x", "jaxload._src.y", "jaxload._src.x"]]
    assert describe_cycles(modules) == ["jaxload._src.x -> jaxload._src.y -(types)-> jaxload._src.x"]


def test_an_import_at_run_time_and_for_types_is_drawn_as_at_run_time():
    source = ("from typing import TYPE_CHECKING\nfrom jaxload._src import x\n"
              "if TYPE_CHECKING:\n    from jaxload._src.x import name\n")
    modules = [Module("jaxload._src.y", "jaxload/_src/y.py", source),
               Module("jaxload._src.x", "jaxload/_src/x.py", "from jaxload._src import y\n")]
    assert describe_cycles(modules) == ["jaxload._src.x -> jaxload._src.y -> jaxload._src.x"]


# --- private attributes of the backends --------------------------------------------------------


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def compat_private_attributes() -> set[str]:
    """The private attribute names the compat package reads on the backends' objects, from its
    ``PRIVATE`` table (``grain.DataLoader._data_source`` -> ``_data_source``)."""
    tree = ast.parse((PACKAGE / "_src" / "compat" / "__init__.py").read_text())
    table = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "PRIVATE" for t in node.targets))
    paths = [path for _, path in ast.literal_eval(table)]
    # ``_src`` is a module of each backend, found through the imports instead (and jaxload has
    # one of its own)
    return {name for path in paths for name in re.findall(r"\b_\w+", path)} - {"_src"}


def _backend_names(tree: ast.AST) -> set[str]:
    """The names a module binds to the backends (``jax``, ``tf``, ``ocp``, ``sharding``, ...)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in THIRD_PARTY:
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] in THIRD_PARTY:
                names.update(alias.asname or alias.name for alias in node.names)
    return names


def _chain(node: ast.expr) -> tuple[str, list[str]] | None:
    """``a.b.c`` as ``("a", ["b", "c"])``; None when it does not start at a name."""
    attributes = []
    while isinstance(node, ast.Attribute):
        attributes.insert(0, node.attr)
        node = node.value
    return (node.id, attributes) if isinstance(node, ast.Name) else None


def private_reads(source: str, on_objects: set[str]) -> list[tuple[int, str]]:
    """``(line, what)`` for each private attribute of a backend that ``source`` reads: imports
    of private modules (``jax._src``), private attributes of a name bound to a backend
    (``jax._src``, ``tf.data._x``, ``getattr(jax, "_x")``), and the attributes ``on_objects``
    on any object (``loader._data_source``, also through ``getattr``)."""
    tree = ast.parse(source)
    backends = _backend_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [f"{node.module}.{a.name}" for a in node.names])
            found += [(node.lineno, f"import {m}") for m in modules
                      if m.split(".")[0] in THIRD_PARTY and any(map(_is_private, m.split(".")))]
        elif isinstance(node, ast.Attribute) and node.attr in on_objects:
            found.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr", "hasattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str)):
            name, owner = node.args[1].value, _chain(node.args[0])
            if name in on_objects or (_is_private(name) and owner and owner[0] in backends):
                found.append((node.lineno, ast.unparse(node)))
    found += _private_chains(tree, backends, on_objects)
    return sorted(set(found))


def _private_chains(tree: ast.AST, backends: set[str], on_objects: set[str]
                    ) -> list[tuple[int, str]]:
    """Whole attribute chains that start at a backend's name and pass a private attribute."""
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            chain = _chain(node)
            if chain and chain[0] in backends and any(
                    _is_private(a) and a not in on_objects for a in chain[1]):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_only_compat_reads_private_attributes_of_the_backends():
    on_objects = compat_private_attributes()
    offenders = [f"{m.path}:{line}: {what}" for m in package_modules()
                 if m.name != COMPAT and not m.name.startswith(f"{COMPAT}.")
                 for line, what in private_reads(m.source, on_objects)]
    assert not offenders, _offenders(
        "private attributes of JAX/Grain/TensorFlow/Orbax read outside jaxload/_src/compat/ "
        "(add an accessor there, listed in its PRIVATE for tests/test_compat.py)", offenders)


def test_compat_lists_what_it_reads():
    assert compat_private_attributes() >= {"_data_source", "_operations", "_shard_options"}


_READS = '''
import jax
import tensorflow as tf
import orbax.checkpoint as ocp
from jax import sharding
from jax._src import mesh
import jax._src.distributed
import numpy as np

def f(loader, self):
    a = jax._src.distributed.global_state
    b = tf.data.Dataset._variant
    c = ocp._internal
    d = sharding._private
    e = getattr(jax, "_src")
    g = loader._data_source
    h = getattr(loader, "_operations", None)
    ok = (jax.numpy, jax.__version__, np._core, self._state, tf.data.Dataset.range(3))
'''


def test_private_reads_are_found():
    found = private_reads(_READS, on_objects={"_data_source", "_operations"})
    assert found == [
        (6, "import jax._src.mesh"),
        (7, "import jax._src.distributed"),
        (11, "jax._src.distributed.global_state"),
        (12, "tf.data.Dataset._variant"),
        (13, "ocp._internal"),
        (14, "sharding._private"),
        (15, "getattr(jax, '_src')"),
        (16, "loader._data_source"),
        (17, "getattr(loader, '_operations', None)"),
    ]
