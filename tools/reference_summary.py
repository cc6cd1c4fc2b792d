"""Writes, at the top of each API reference page (docs/reference/*.md), the list of its public
names with their signatures and first lines, and the options of each function, so that the
pages read as files too (on GitHub, where the ``::: name`` directives show nothing).

The site renders the full reference from the docstrings below that list. The list sits between
``<!-- names -->`` and ``<!-- /names -->``; ``tests/test_docs_claims.py`` checks it is current.

Run: .venv/bin/python tools/reference_summary.py        (rewrites the pages)
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "docs" / "reference"
START = ("<!-- names: written by tools/reference_summary.py from the docstrings; the full "
         "reference follows -->")
END = "<!-- /names -->"
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.M)


def resolve(name: str) -> object:
    module, _, attribute = name.rpartition(".")
    if module:
        parent = importlib.import_module(module)
        if hasattr(parent, attribute) and not inspect.ismodule(getattr(parent, attribute)):
            return getattr(parent, attribute)
    return importlib.import_module(name)


def first_sentence(text: str | None) -> str:
    """The first sentence of a docstring's first paragraph, in Markdown."""
    text = " ".join((text or "").strip().split("\n\n")[0].split())
    text = re.sub(r":\w+:`~?(?:[\w.]*\.)?([\w]+)`", r"`\1`", text)  # :class:`~jaxload.Loader`
    text = text.replace("``", "`")
    match = re.match(r"(.+?(?<!e\.g)(?<!i\.e)\.)(\s|$)", text)
    sentence = (match.group(1) if match else text).rstrip(":")
    return sentence if sentence.endswith(".") else sentence + "."


def signature(obj: object) -> str:
    try:
        parameters = inspect.signature(obj).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    shown, star = [], False
    for p in parameters:
        if p.kind is p.KEYWORD_ONLY and not star:
            shown.append("*")
            star = True
        text = ("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD
                else "") + p.name
        if p.kind is p.VAR_POSITIONAL:
            star = True
        if p.default is not p.empty:
            text += f"={p.default!r}"
        shown.append(text)
    return f"({', '.join(shown)})"


def options(obj: object) -> list[tuple[str, str]]:
    """The ``Args:`` section of a docstring: each argument with its first sentence."""
    doc = inspect.getdoc(obj) or ""
    section = re.search(r"^Args:\n((?:[ ]{2}.*\n?|\n)+)", doc, re.M)
    if not section:
        return []
    found, name, lines = [], None, []
    for line in section.group(1).splitlines():
        item = re.match(r"^  (\w+)(?: \([^)]*\))?: ?(.*)$", line)
        if item:
            if name:
                found.append((name, first_sentence(" ".join(lines))))
            name, lines = item.group(1), [item.group(2)]
        elif name:
            lines.append(line.strip())
    if name:
        found.append((name, first_sentence(" ".join(lines))))
    return found


def names_of(name: str) -> list[str]:
    obj = resolve(name)
    if inspect.ismodule(obj):
        return [f"{name}.{n}" for n in getattr(obj, "__all__", ())]
    return [name]


def block(page: str) -> str:
    rows, option_lists = [], []
    for directive in DIRECTIVE.findall(page):
        for name in names_of(directive):
            obj = resolve(name)
            call = signature(obj) if inspect.isfunction(obj) else ""
            rows.append(f"| `{name}{call}` | {first_sentence(inspect.getdoc(obj))} |")
            listed = options(obj) if inspect.isfunction(obj) else []
            if listed:
                option_lists += ["", f"Options of `{name}`:", ""]
                option_lists += [f"- `{arg}`: {text}" for arg, text in listed]
    return "\n".join([START, "", "| name | what it is |", "|---|---|", *rows, *option_lists,
                      "", END])


def updated(text: str) -> str:
    if START in text:
        head, rest = text.split(START, 1)
        text = head.rstrip("\n") + "\n\n" + rest.split(END, 1)[1].lstrip("\n")
    first = DIRECTIVE.search(text)
    if first is None:
        return text
    head, tail = text[:first.start()].rstrip("\n"), text[first.start():]
    return f"{head}\n\n{block(text)}\n\n{tail}" if head else f"{block(text)}\n\n{tail}"


def main() -> int:
    for path in sorted(PAGES.glob("*.md")):
        text = path.read_text()
        new = updated(text)
        if new != text:
            path.write_text(new)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
