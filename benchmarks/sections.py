"""A benchmark script's section of benchmarks/results.md, written or replaced in place."""

from __future__ import annotations

from pathlib import Path


def write_section(out: Path, marker: str, text: str) -> None:
    """Replaces the section that starts with ``marker`` (up to the next ``<!--`` marker, which
    another script wrote) with ``text``, or appends it."""
    old = out.read_text() if out.exists() else ""
    if marker in old:
        head, rest = old.split(marker, 1)
        tail = rest[rest.index("<!--"):] if "<!--" in rest else ""
        old = head.rstrip("\n") + "\n"
        text = text + ("\n" + tail if tail else "")
    out.write_text(old + "\n" + text)
