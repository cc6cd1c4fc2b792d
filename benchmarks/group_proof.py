"""What the group proof costs: a loading group of several processes (one model replica spread
over 2 processes) compares the digests of the rows its processes read at every step
(jaxload/_src/group_proof.py). The same loader with the proof on (``checks="first"``, the
default) and off (``checks="never"``, which also drops the first step's check), in the same run.

The data: 4,096 rows of a 32x32x3 float32 image and an int64 label (48 MB) in memory, global
batch 128 and 16 (32 and 256 steps a pass), ``model_replicas_across_processes(2)`` at 2 processes x 4 CPU
devices (one loading group of 2 processes: every process reads every row) and 4 x 2 (two groups
of 2); tf.data (``from_tensor_slices(...).shuffle(4096, seed=1)``) and Grain
(``MapDataset.source(...).shuffle(seed=1)``). Timed: 3 passes of one loader, from building it to
the last batch ready, slowest process, median of interleaved rounds (min-max). Also the bytes of
this process's reports per round (``stats().round_bytes / rounds``) with the proof on and off.

Writes (or replaces) its section of benchmarks/results.md.
Run: .venv/bin/python benchmarks/group_proof.py [--quick] [--topologies 2x4,4x2]
"""

from __future__ import annotations

import statistics
import time
import warnings
from pathlib import Path

from sections import arguments, ended, ms_cell, publish, slowest

import jaxload
import jaxload.testing

SECTION = "<!-- group_proof.py -->"
N, SIDE, PASSES = 4096, 32, 3
GLOBAL_BATCHES = (128, 16)  # 32 and 256 steps a pass
BACKENDS = ("tf.data", "grain")


def _arrays():
    import numpy as np

    rng = np.random.default_rng(0)
    return {"image": rng.random((N, SIDE, SIDE, 3), dtype=np.float32),
            "label": np.arange(N, dtype=np.int64)}


def _loader(backend: str, data, checks: str, batch: int):
    layout = jaxload.model_replicas_across_processes(2)
    if backend == "tf.data":
        import tensorflow as tf

        ds = tf.data.Dataset.from_tensor_slices(data).shuffle(N, seed=1)
        return jaxload.from_tf_data(ds, layout, global_batch_size=batch, checks=checks)
    import grain

    rows = [{"image": data["image"][i], "label": data["label"][i]} for i in range(N)]
    ds = grain.MapDataset.source(rows).shuffle(seed=1)
    return jaxload.from_grain(ds, layout, global_batch_size=batch, checks=checks)


def _passes(backend: str, data, checks: str, batch: int) -> tuple[float, float]:
    """Seconds of 3 passes of one loader (its build included), and its report bytes per round."""
    import jax
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(f"group_proof {backend} {checks} {batch}")
    started = time.perf_counter()
    loader = _loader(backend, data, checks, batch)
    for _ in range(PASSES):
        for batch in loader:
            jax.block_until_ready(batch)
    seconds = time.perf_counter() - started
    stats = loader.stats()
    return seconds, stats.round_bytes / max(stats.rounds, 1)


def measure(rounds: int) -> dict:
    """Worker side: per (backend, checks), each round's seconds and bytes per round."""
    warnings.simplefilter("ignore")
    data, out = _arrays(), {}
    for backend in BACKENDS:
        for batch in GLOBAL_BATCHES:
            for r in range(rounds):
                for checks in ("first", "never") if r % 2 == 0 else ("never", "first"):
                    seconds, per_round = _passes(backend, data, checks, batch)
                    out.setdefault(f"{backend}|{batch}|{checks}", []).append(seconds)
                    out[f"{backend}|{batch}|{checks}|bytes"] = per_round
    return out


def rows(topology: str, results: list[dict]) -> list[str]:
    lines = []
    for backend in BACKENDS:
        for batch in GLOBAL_BATCHES:
            key = f"{backend}|{batch}"
            times = {c: slowest(results, f"{key}|{c}") for c in ("first", "never")}
            ratio = statistics.median(times["first"]) / statistics.median(times["never"])
            sent = {c: max(r[f"{key}|{c}|bytes"] for r in results) for c in ("first", "never")}
            lines.append(f"| {topology} | {backend} | {batch} ({N // batch}) | "
                         f"{ms_cell(times['never'], PASSES)} | {ms_cell(times['first'], PASSES)} | "
                         f"{ratio:.2f} | "
                         f"{sent['never']:.0f} | {sent['first']:.0f} |")
    return lines


def main() -> None:
    args = arguments()
    rounds = 2 if args.quick else 5
    started = time.perf_counter()
    table = ["| topology | backend | global batch (steps a pass) | proof off, ms a pass | "
             "proof on, ms a pass | on / off | report bytes a round, off | on |",
             "|---|---|---|---|---|---|---|---|"]
    topologies = "2x4,4x2" if args.topologies == "1x8,2x4,4x2" else args.topologies
    for topology in topologies.split(","):
        processes, devices = map(int, topology.split("x"))
        table += rows(topology, jaxload.testing.run(
            measure, num_processes=processes, local_devices=devices, args=(rounds,),
            timeout_s=1200))
    publish(Path(args.out), SECTION, [
        SECTION, "", "## The group proof: replicas across processes compare their rows", "",
        f"One model replica over 2 processes (`model_replicas_across_processes(2)`), {N} rows "
        f"of {SIDE}x{SIDE}x3 float32 and a label in memory, shuffled (seed 1), global batch "
        f"{' and '.join(map(str, GLOBAL_BATCHES))}: milliseconds a pass over {PASSES} passes "
        f"of one loader (its build included), slowest process, median of {rounds} interleaved "
        "rounds (min-max). *Off*: "
        "`checks=\"never\"` (no proof and no first-step check); *on*: the default, which hashes "
        "every batch read and compares the digests in the step agreement's rounds (a pass "
        "reads each round's window ahead: rounds after 1, 4, 16, 64 steps, then every 256).", "",
        *table, "", ended(started)])


if __name__ == "__main__":
    main()
