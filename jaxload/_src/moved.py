"""The modules that moved under ``jaxload/_src/`` stay importable at their old paths
(``jaxload.layouts``, ``jaxload.adapters.grain``, ...), with a ``DeprecationWarning``: the
public names are ``jaxload.*`` and the modules ``check``, ``checkpoint``, ``testing``, ``cli``."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

# old module path under jaxload -> the module under jaxload._src that holds its names now
MOVED = {name: name for name in (
    "agreement", "assemble", "cluster", "explain", "loader", "meshes", "passes",
    "prefetch", "protocol", "records", "remainder", "signature", "state", "stats", "transport",
    "watchdog", "whereabouts", "wire", "adapters", "adapters.grain", "adapters.tfdata",
    "adapters.stack")}
MOVED["layouts"] = "layout"  # split up; jaxload._src.layout imports its public names


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``jaxload.<old>``: a module whose attributes are those of ``jaxload._src.<old>``."""

    def find_spec(self, fullname: str, path: object, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("jaxload.") or fullname[len("jaxload."):] not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a plain module

    def exec_module(self, module: types.ModuleType) -> None:
        new = "jaxload._src." + MOVED[module.__name__[len("jaxload."):]]
        warnings.warn(f"{module.__name__} is private now; import the public names from jaxload "
                      f"(or jaxload.check / checkpoint / testing / cli). It is {new}.",
                      DeprecationWarning, stacklevel=2)
        # the import hands out what sys.modules holds after this: the module itself, so that
        # what is set on it (a test's patch) is seen by the package
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
