"""A benchmark script's section of benchmarks/results.md, written or replaced in place."""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


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


def publish(out: Path, marker: str, lines: list[str]) -> None:
    """Writes ``lines`` as the section ``marker`` of ``out`` (:func:`write_section`) and prints
    them."""
    text = "\n".join(lines) + "\n"
    write_section(out, marker, text)
    print(text)


def ended(started: float) -> str:
    """The closing line of a section: the run's seconds since ``started`` and the machine's
    load then (this machine's noise shows in it)."""
    return (f"({time.perf_counter() - started:.0f} s in all; load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end.)")


def arguments() -> argparse.Namespace:
    """The options of a benchmark over topologies: ``--quick``, ``--topologies`` (``PxD`` with
    commas), ``--out`` (results.md beside this file)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--topologies", default="1x8,2x4,4x2")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results.md"))
    return parser.parse_args()


def timed_loop(make: Callable[[], Iterable[Any]]) -> dict[str, float]:
    """Iterates ``make()``'s batches, each waited for: the steps, the seconds from building to
    the last batch (``wall``), to the first (``first``), after it (``after first``), and the
    process's CPU seconds (all threads) over the same span."""
    import jax

    cpu, started = time.process_time(), time.perf_counter()
    batches, steps, first = make(), 0, 0.0
    for batch in batches:
        jax.block_until_ready(batch)
        steps += 1
        ended = time.perf_counter()
        first = first or ended
        cpu_ended = time.process_time()
    with contextlib.suppress(AttributeError):
        batches.close()  # type: ignore[attr-defined]
    return {"steps": steps, "wall": ended - started, "first": first - started,
            "after first": ended - first, "cpu": cpu_ended - cpu}


def first_batches_after(make: Callable[[], Any], states: dict[Any, Any], rounds: int
                        ) -> dict[Any, list[float]]:
    """Per key of ``states``, ``rounds`` times: the seconds from a fresh loader's (``make()``)
    first ``next()`` after ``set_state(state, head_start=False)`` to its batch."""
    out: dict[Any, list[float]] = {}
    for key, state in states.items():
        for _ in range(rounds):
            loader = make()
            loader.set_state(state, head_start=False)
            started = time.perf_counter()
            next(iter(loader))["image"].block_until_ready()
            out.setdefault(key, []).append(time.perf_counter() - started)
            loader.close()
    return out


def ms_cell(seconds: list[float], per: int = 1) -> str:
    """``seconds / per`` in milliseconds: median (min-max)."""
    median = statistics.median(seconds) / per
    return f"{median * 1e3:.0f} ({min(seconds) / per * 1e3:.0f}-{max(seconds) / per * 1e3:.0f})"


def slowest(results: list[dict], key: str) -> list[float]:
    """Each round's value of ``key`` on the slowest process (``results``: one dict a process)."""
    return [max(v) for v in zip(*(r[key] for r in results), strict=True)]
