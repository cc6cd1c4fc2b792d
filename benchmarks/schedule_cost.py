"""What a batch-size schedule costs a step: time per 256-row step with one size, and under
schedules whose first size makes the pipeline batch smaller units that each step joins.

Under a schedule the pipeline batches ``unit`` rows per loading group (the gcd of the sizes'
``size / K``) and each step's batch is joined on the host from ``size / K / unit`` of them. In N
processes x D CPU devices, a Grain pass (32x32x3 float32 images and an int32 label, data
parallel, prefetch 2) is timed after the schedule's first step, over steps of 256 rows, alternately
for each case over several rounds; the table gives the median ms per 256-row step of the slowest
process, and its ratio to the plain 256-row loader of the same run.

Writes (or replaces) its section of benchmarks/results.md.
Run: .venv/bin/python benchmarks/schedule_cost.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from sections import publish

import jaxload.testing

ROWS, STEPS = 256, 400
SECTION = "<!-- schedule_cost.py: the section below is written by that script -->"
CASES = {  # name: (global_batch_size, the parts each 256-row step is joined from at 2 processes)
    "one size: 256": (ROWS, 1),
    "schedule [(0, 64), (1, 256)]": ([(0, 64), (1, ROWS)], 4),
    "schedule [(0, 32), (1, 256)]": ([(0, 32), (1, ROWS)], 8),
}


def measure(rounds: int, steps: int) -> dict:
    import time

    import grain
    import jax
    import numpy as np

    import jaxload

    images = np.random.default_rng(0).random((1024, 32, 32, 3), np.float32)
    ds = grain.MapDataset.range(ROWS * (steps + 1)).map(
        lambda i: {"image": images[i % 1024], "label": np.int32(i)})
    layout = jaxload.data_parallel()

    def one_pass(size) -> float:
        loader = jaxload.from_grain(ds, layout, global_batch_size=size)
        batches = iter(loader)
        jax.block_until_ready(next(batches))  # the schedule's first step (or a first 256)
        start, n = time.perf_counter(), 0
        for batch in batches:
            if batch["label"].shape[0] != ROWS:  # the last, smaller step of a schedule
                break
            jax.block_until_ready(batch)
            n += 1
            if n == steps - 1:
                break
        return (time.perf_counter() - start) / n

    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(rounds):
        for name, (size, _) in CASES.items():
            times[name].append(one_pass(size))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds, steps = (3, 100) if args.quick else (5, STEPS)
    results = jaxload.testing.run(measure, num_processes=2, local_devices=4,
                                  args=(rounds, steps), timeout_s=1800)
    slowest = {name: max(r[name] for r in results) for name in CASES}
    base = slowest["one size: 256"]
    lines = [SECTION, "## A batch-size schedule's cost per step",
             "", "2 processes x 4 CPU devices, Grain, 256-row steps of 32x32x3 float32 images "
             f"(3 MiB), median of {rounds} rounds of {steps} steps, slowest process:", "",
             "| loader | parts joined per step | ms per 256-row step | vs one size |",
             "|---|---|---|---|"]
    for name, (_, parts) in CASES.items():
        lines.append(f"| {name} | {parts} | {slowest[name] * 1e3:.2f} | "
                     f"{slowest[name] / base:.2f} |")
    publish(Path(__file__).parent / "results.md", SECTION, lines)


if __name__ == "__main__":
    main()
