"""A griffe extension for the API reference (``mkdocs.yml``): Sphinx roles become links, and
``Example:`` sections render as examples.

jaxload's docstrings cross-reference with Sphinx roles (``:class:`~jaxload.Loader```,
``:func:`simulated_devices```), which Markdown would show as they are written. This turns each
into an optional cross-reference: a link where the target is on a page of the reference, plain
code where it is not (a private module), and never a build warning. Names without a dot are
looked up in the docstring's class, then in its module.

Google style (griffe's parser) knows ``Examples:``; jaxload's docstrings say ``Example:``, which
griffe would read as an admonition and render its ``>>>`` lines as Markdown quotes.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`(~?)([\w.]+)`")
_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


def _resolve(obj: griffe.Object, target: str) -> str:
    """The full path of ``target`` as written in ``obj``'s docstring, if griffe knows it."""
    scopes = []
    scope = obj if obj.is_class or obj.is_module else obj.parent
    while scope is not None:
        scopes.append(scope.path)
        scope = scope.parent
    for candidate in [target] + [f"{path}.{target}" for path in scopes]:
        try:
            obj.modules_collection[candidate]
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        return candidate
    return target


def _rewrite(obj: griffe.Object) -> None:
    docstring = obj.docstring
    if docstring is None:
        return
    docstring.value = _EXAMPLE.sub(r"\1Examples:", docstring.value)

    def link(match: re.Match) -> str:
        short, target = match.groups()
        shown = target.rsplit(".", 1)[-1] if short else target
        return (f'<autoref identifier="{_resolve(obj, target)}" optional>'
                f"<code>{shown}</code></autoref>")

    docstring.value = _ROLE.sub(link, docstring.value)


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        todo: list[griffe.Object] = [pkg]
        while todo:
            obj = todo.pop()
            _rewrite(obj)
            todo.extend(m for m in obj.members.values() if not m.is_alias)
