"""The function a process of :mod:`jaxload.testing` runs, loaded again from its file; and the
guard against the endless processes a call at that file's top level would start.

Example:
  >>> function_file(function_file).name
  'worker_target.py'
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def function_file(fn: Callable[..., Any]) -> Path:
    """The file ``fn`` is defined in, which each process loads again."""
    module = sys.modules.get(fn.__module__)
    file = getattr(module, "__file__", None)
    if file is None or "<locals>" in fn.__qualname__:
        raise TypeError(f"{fn.__qualname__} must be a module-level function of a file the "
                        f"processes can load it from (it is defined in {fn.__module__})")
    return Path(file).resolve()


_LOADING: list[str] = []  # the files a process of jaxload.testing is loading to find its fn


def check_not_loading(what: str) -> None:
    """Refuses to start processes from the top level of a file that a process of
    ``jaxload.testing`` is loading to find its function: each new process would load it
    again and start processes of its own, without end."""
    if _LOADING:
        raise RuntimeError(
            f"{what} was called while this process loaded {_LOADING[-1]} to find the function "
            "it runs: each process loads that file again, so a call at its top level would "
            "start processes without end. Put the call under if __name__ == '__main__': (or "
            "in a test function)")


def function_at(source: str, qualname: str) -> Any:
    """The function ``qualname`` of the file ``source``, loaded as a new module (its own helper
    modules, next to it, are importable). The module takes the file's own name where no other
    module holds it, so that what the process pickles by reference (a Grain ``DataLoader``'s
    source and operations, for its worker processes) is found again by that name."""
    folder = str(Path(source).parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = Path(source).stem
    held = getattr(sys.modules.get(name), "__file__", None)
    if name in sys.modules and not (held and Path(held).resolve() == Path(source).resolve()) or (
            not name.isidentifier()):
        name = f"_jaxload_target_{name}"
    spec = importlib.util.spec_from_file_location(name, source)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {source} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    _LOADING.append(source)
    try:
        spec.loader.exec_module(module)
    finally:
        _LOADING.pop()
    fn: Any = module
    for part in qualname.split("."):
        fn = getattr(fn, part)
    return fn
