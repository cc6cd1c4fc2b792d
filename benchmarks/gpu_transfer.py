"""On a real accelerator: the host-to-device transfer of a batch, assembled in the loop or ahead.

On CPU devices a batch's "transfer" is a copy done before the call returns, so a thread that
assembles batches ahead only shares the GIL with the loop (the in-memory rows of
``tf_memory.py``). On a GPU a transfer from host memory takes milliseconds and runs beside the
host: what matters is whether the next batches' transfers are already under way when the step
asks for them. This measures it with one process and one GPU, over a Grain ``MapDataset`` of
images in host memory (Grain only: the GPU machines here have JAX but no TensorFlow; jaxload's
prefetch thread and assembly are the same code for both backends).

Per step, milliseconds (median of 3 runs of ``STEPS`` steps, after a warm-up run), for:

- *recipe*: ``MapDataset.batch(B)`` iterated, ``jax.make_array_from_process_local_data`` per
  feature in the loop (the hand recipe of ``bench.py`` and ``matrix.py``); iterating a
  ``MapDataset`` runs Grain's default ``ReadOptions``: 16 threads build batches ahead;
- *recipe, 2 ahead*: the same, keeping two assembled batches ahead on the loop's thread (what
  ``flax.jax_utils.prefetch_to_device`` does): the strongest hand-written loop here;
- *jaxload prefetch=0*: ``next()`` reads and assembles;
- *jaxload prefetch=2* (the default): a background thread assembles two batches ahead; the
  batches are built by index on that thread, or with ``read_options`` by Grain's 16 threads;
- ``checks="never"``: without the first step's check of a pass (it reads the batch back).

Each with a step that costs about 0.4 ms or 6 ms on the GPU (bf16 matrix products), the loop
either waiting for the step's loss every step (``float(loss)``, as a loop that logs every step)
or not (JAX's asynchronous dispatch).

Run (needs a GPU; ``--quick`` runs a small version on any device):
  python benchmarks/gpu_transfer.py [--quick] [--json FILE]
  python benchmarks/gpu_transfer.py --publish FILE [EARLIER]   # as results.md's section
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import time
from pathlib import Path

SECTION = "<!-- gpu_transfer.py -->"
SIDE, ROWS = 224, 2048
BATCHES = ((64, "uint8"), (256, "uint8"), (256, "float32"))
METHODS = ("recipe", "recipe, 2 ahead", "jaxload prefetch=0", "jaxload prefetch=2",
           "jaxload prefetch=0, checks=never", "jaxload prefetch=2, checks=never",
           "jaxload prefetch=2, 16 threads")
PASSES = 4  # the images repeated: a pass of 32 steps at 256 rows, of 128 at 64


def _ahead(batches, depth):
    """Keeps ``depth`` batches assembled ahead of the one handed out, on the loop's thread."""
    ready: collections.deque = collections.deque()
    for batch in batches:
        ready.append(batch)
        if len(ready) > depth:
            yield ready.popleft()
    while ready:
        yield ready.popleft()


def measure(quick: bool, batches: tuple[tuple[int, str], ...], steps_ms: tuple[bool, ...]
            ) -> dict:
    import jax
    import numpy as np

    side, rows, steps = (32, 256, 8) if quick else (SIDE, ROWS, 48)
    out = {"device": str(jax.devices()[0].device_kind)}
    rng = np.random.default_rng(0)
    for batch_size, dtype in batches:
        images = rng.integers(0, 255, (rows, side, side, 3), dtype=np.uint8).astype(dtype)
        out.update(_measured(images, batch_size, steps_ms, steps))
    return out


def _measured(images, batch_size: int, steps_ms: tuple[bool, ...], steps: int) -> dict:
    """Per (step, the loop waits, method): the milliseconds a step of 3 runs."""
    import grain
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxload

    labels = np.arange(len(images), dtype=np.int32)
    rows_ds = grain.MapDataset.range(len(images)).map(
        lambda i: {"image": images[i], "label": labels[i]}).repeat(PASSES)
    layout = jaxload.data_parallel()
    loaders = {(p, checks): jaxload.from_grain(rows_ds, layout, global_batch_size=batch_size,
                                               prefetch=p, checks=checks)
               for p in (0, 2) for checks in ("first", "never")}
    loaders[2, "threads"] = jaxload.from_grain(  # Grain's thread pool builds the batches
        rows_ds, layout, global_batch_size=batch_size,
        read_options=grain.ReadOptions(num_threads=16, prefetch_buffer_size=4))

    def recipe():
        for local in rows_ds.batch(batch_size):
            yield {k: jax.make_array_from_process_local_data(layout.sharding, v)
                   for k, v in local.items()}

    def batches(method, n):
        if method.startswith("recipe"):
            return _ahead(_passes(recipe, n), 2) if "ahead" in method else _passes(recipe, n)
        loader = loaders[0 if "=0" in method else 2, "never" if "never" in method else (
            "threads" if "threads" in method else "first")]
        return _passes(loader.__iter__, n)

    width = min(8192, images[0].size)
    weights = jnp.ones((width, width), jnp.bfloat16)
    first = jaxload.assemble({"image": images[:batch_size], "label": labels[:batch_size]},
                             layout.plan(batch_size))
    out = {}
    for heavy in steps_ms:
        step = _step(batch_size, width, heavy)
        jax.block_until_ready(step(weights, first))
        started = time.perf_counter()
        for _ in range(10):
            jax.block_until_ready(step(weights, first))
        step_ms = (time.perf_counter() - started) / 10 * 1e3

        def run(method, wait, n, step=step):
            w = weights
            started = time.perf_counter()
            for batch in batches(method, n):
                w, loss = step(w, batch)
                if wait:
                    float(loss)
            jax.block_until_ready(w)
            return (time.perf_counter() - started) / n * 1e3

        for wait in (True, False):
            key = (f"{batch_size}|{images.dtype}|{images[:batch_size].nbytes}|{step_ms:.2f}|"
                   f"{wait}")
            for method in METHODS:
                run(method, wait, 4)
                out[f"{key}|{method}"] = [run(method, wait, steps) for _ in range(3)]
    return out


def _step(batch_size: int, width: int, heavy: bool):
    """A jitted training step: about 0.4 ms on an H200, or 6 ms where ``heavy``."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(w, batch):
        x = batch["image"].astype(jnp.bfloat16).reshape(batch_size, -1)[:, :width]
        z = w
        for _ in range(4 if heavy else 0):
            z = jnp.tanh(z @ w)
        return w, (x @ w).mean() + z.mean()
    return step


def _passes(make, n):
    """``n`` batches, one pass of ``make()`` after another."""
    while True:
        for batch in make():
            yield batch
            n -= 1
            if not n:
                return


def table(results: dict, earlier: dict | None = None) -> list[str]:
    lines = [SECTION, "", "## On a GPU: a batch's transfer, assembled in the loop or ahead", "",
             f"One process, one {results['device']}; a Grain `MapDataset` of 224x224x3 images "
             f"in host memory (repeated {PASSES} times: a pass of {PASSES * ROWS} images), data "
             "parallel. Milliseconds a step, median of 3 runs of 48 steps "
             "(min-max). *recipe*: `make_array_from_process_local_data` per feature in the "
             "loop, over Grain's own iteration (its default `ReadOptions`: 16 threads build "
             "batches ahead; jaxload's default builds them by index on one thread); *2 ahead*: "
             "two batches assembled ahead on the loop's thread (as "
             "`flax.jax_utils.prefetch_to_device`); jaxload's `prefetch=2` (the default) "
             "assembles them on a background thread. *waits*: the loop reads the step's loss "
             "every step. Run with `python benchmarks/gpu_transfer.py` on a machine with a "
             "GPU.", ""] + _rows(results)
    if earlier is not None:
        lines += ["", "An earlier run (2,048 images, not repeated: a pass of 8 steps at 256 "
                  "rows, so the first step's check of a pass weighs 4 times more), with a step "
                  "of about 6 ms too and float32 images:", ""] + _rows(earlier)
        lines += ["", "The transfer alone (by hand, on the same machine, a 39 MB uint8 batch "
                  "already in host memory): one `jax.device_put` waited for costs 8.3 ms; 20 "
                  "issued back to back, then waited for, 1.4 ms each; issued from 2 threads "
                  "that each wait, 4.5 ms each, from 4 threads 2.5 ms. `jaxload.assemble`, "
                  "`make_array_from_process_local_data` per feature and one `device_put` each "
                  "return in 0.3-0.4 ms and take the same time to arrive."]
    return lines


def _rows(results: dict) -> list[str]:
    rows: dict[str, dict[str, list[float]]] = {}
    for key, values in results.items():
        if key == "device":
            continue
        *where, method = key.split("|")
        rows.setdefault("|".join(where), {})[method] = values
    shown = [m for m in METHODS if any(m in methods for methods in rows.values())]
    lines = ["| batch | step (ms) | loop waits | " + " | ".join(shown)
             + " | prefetch=2 / best recipe |", "|---|---|---|" + "---|" * len(shown) + "---|"]
    for where, methods in rows.items():
        size, dtype, nbytes, step_ms, wait = where.split("|")
        cells = [f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" if (
            v := methods.get(method)) else "—" for method in shown]
        best = min(statistics.median(methods[m]) for m in METHODS[:2])
        ratio = statistics.median(methods[METHODS[3]]) / best
        lines.append(f"| {size} x {dtype} ({int(nbytes) / 1e6:.0f} MB) | {step_ms} | "
                     f"{'yes' if wait == 'True' else 'no'} | " + " | ".join(cells)
                     + f" | {ratio:.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batches", default=",".join(f"{n}x{t}" for n, t in BATCHES),
                        help="rows x dtype, with commas")
    parser.add_argument("--light-only", action="store_true", help="no 6 ms step")
    parser.add_argument("--json", default=None, help="where to write the raw results")
    parser.add_argument("--publish", nargs="+", default=None,
                        help="results files (a run, and optionally an earlier one with other "
                        "rows) written as results.md's section")
    args = parser.parse_args()
    if args.publish:
        from sections import publish

        runs = [json.loads(Path(f).read_text()) for f in args.publish]
        publish(Path(__file__).parent / "results.md", SECTION, table(*runs[:2]))
        return
    batches = tuple((int(n), t) for n, t in (b.split("x") for b in args.batches.split(",")))
    results = measure(args.quick, batches[:1] if args.quick else batches,
                      (False,) if args.light_only else (False, True))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
