"""The watchdog's cost to a healthy run: time per step with and without it, and what it adds at
the coordinator.

In N processes x D CPU devices, a Grain pass of known length (cheap elements, global batch 256,
data parallel, prefetch 2) is timed from the iterator's creation to the last batch, alternately
with the watchdog on and off (off: its thread is not started and its per-step hooks do nothing),
over several rounds; the table gives the median ms per step of the slowest process. Also, with
the watchdog on: bytes through the coordinator per step (everything jaxload sent and received)
and the watchdog's own reads, for 2, 4 and 8 processes (the figure of the scale work, which must
stay linear in the process count).

Writes (or replaces) its section of benchmarks/results.md.
Run: .venv/bin/python benchmarks/watchdog_cost.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from pathlib import Path

from sections import publish

import jaxload.testing

ROWS, STEPS = 256, 1000
SECTION = "<!-- watchdog_cost.py: the section below is written by that script -->"


def measure(rounds: int, steps: int) -> dict:
    import time

    import grain
    import jax
    import numpy as np

    import jaxload
    from jaxload._src import agreement, watchdog

    images = np.random.default_rng(0).random((1024, 32, 32, 3), np.float32)
    ds = grain.MapDataset.range(ROWS * steps).map(
        lambda i: {"image": images[i % 1024], "label": np.int32(i)})
    layout = jaxload.data_parallel()
    dog = watchdog.this_process()
    real = (watchdog.Watchdog.start, watchdog.Watchdog.reading, watchdog.Watchdog.interruption)

    def switch(on: bool) -> None:
        if on:
            watchdog.Watchdog.start, watchdog.Watchdog.reading, watchdog.Watchdog.interruption = real
        else:
            watchdog.Watchdog.start = lambda self: None
            watchdog.Watchdog.reading = lambda self, *a, **k: contextlib.nullcontext()
            watchdog.Watchdog.interruption = lambda self, exchange: None

    def one_pass() -> float:
        start = time.perf_counter()
        for batch in jaxload.from_grain(ds, layout, global_batch_size=ROWS):
            jax.block_until_ready(batch)
        return (time.perf_counter() - start) / steps

    times: dict[bool, list[float]] = {True: [], False: []}
    one_pass()  # compiles, starts the watchdog
    started = (dog.rpcs, time.monotonic())
    for r in range(rounds):
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            switch(on)
            times[on].append(one_pass())
    switch(True)
    transport = agreement.this_process_transport()
    before = (transport.sent + transport.received, dog.rpcs, time.monotonic())
    one_pass()
    after = (transport.sent + transport.received, dog.rpcs, time.monotonic())
    return {"times": times, "bytes_per_step": (after[0] - before[0]) / steps,
            "watchdog_reads": after[1] - started[0], "seconds": after[2] - started[1],
            "steps": (2 * rounds + 1) * steps, "process": jax.process_index()}


def run(processes: int, devices: int, rounds: int, steps: int) -> list[dict]:
    return jaxload.testing.run(measure, num_processes=processes, local_devices=devices,
                               args=(rounds, steps), timeout_s=900)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results.md"))
    args = parser.parse_args()
    rounds, steps = (3, 200) if args.quick else (5, STEPS)
    lines = [SECTION, "", "## The watchdog's cost to a healthy run", "",
             f"A Grain pass of {steps} cheap steps (global batch {ROWS}, data parallel, "
             "prefetch 2), timed from the iterator's creation to the last batch, alternately "
             f"with the watchdog on and off, {rounds} rounds; median ms per step of the slowest "
             "process, and in brackets min-max.", "",
             "| topology | watchdog on | watchdog off | on / off |", "|---|---|---|---|"]
    scale = []
    for processes, devices in ((2, 4), (4, 2), (8, 1)):
        results = run(processes, devices, rounds, steps)
        per_round = {on: [max(r["times"][on][i] for r in results) for i in range(rounds)]
                     for on in (True, False)}
        on, off = (statistics.median(per_round[k]) for k in (True, False))
        if processes < 8:
            lines.append(f"| {processes}x{devices} | {on * 1e3:.2f} ({min(per_round[True]) * 1e3:.2f}-"
                         f"{max(per_round[True]) * 1e3:.2f}) | {off * 1e3:.2f} "
                         f"({min(per_round[False]) * 1e3:.2f}-{max(per_round[False]) * 1e3:.2f})"
                         f" | {on / off:.2f} |")
        total = sum(r["bytes_per_step"] for r in results)
        reads = sum(r["watchdog_reads"] for r in results)
        seconds = max(r["seconds"] for r in results)
        scale.append(f"| {processes} | {total:.0f} | {reads} in {seconds:.1f} s and "
                     f"{results[0]['steps']} steps |")
    lines += ["", "Bytes through the coordinator per step (all processes, watchdog on; the last "
              "pass), and the watchdog's blocking reads of all processes from the first timed "
              "pass to the last (one per process per 10 s, whatever the step rate):", "",
              "| processes | coordinator bytes per step | watchdog reads |", "|---|---|---|"]
    lines += scale
    publish(Path(args.out), SECTION, lines)


if __name__ == "__main__":
    main()
