"""Uneven data: two loading groups whose pipelines have 100 and 40 elements.

2 processes x 4 fake CPU devices, data parallel, global batch 16 (8 rows per process). Each
process's Grain pipeline is already its own shard (``shard=False``), as with files of unequal
length. With ``remainder="drop"`` both processes stop after 5 steps (40 // 8); with
``remainder="pad"`` both run 13 steps (ceil(100 / 8)) and the mask marks the real rows.
Run: ``.venv/bin/python examples/uneven.py``.
"""

from __future__ import annotations

import jaxload.testing

LENGTHS = (100, 40)


def run_epochs():
    import grain
    import jax
    import numpy as np

    import jaxload

    layout = jaxload.data_parallel()
    p = jax.process_index()
    ds = grain.MapDataset.range(p * 1000, p * 1000 + LENGTHS[p]).map(lambda i: {"id": i})
    out = {}
    for mode in ("drop", "pad"):
        loader = jaxload.from_grain(ds, layout, global_batch_size=16, shard=False, remainder=mode)
        steps, real = 0, 0
        for batch in loader:
            steps += 1
            if mode == "pad":  # this process's real rows, from its own shards of the mask
                real += sum(int(np.asarray(s.data).sum()) for s in batch["mask"].addressable_shards)
            else:
                real += sum(s.data.shape[0] for s in batch["id"].addressable_shards)
        out[mode] = (steps, real)
    return out


def main():
    results = jaxload.testing.run(run_epochs, num_processes=2, local_devices=4)
    for mode in ("drop", "pad"):
        print(f'remainder="{mode}"')
        for p, r in enumerate(results):
            steps, real = r[mode]
            print(f"  process {p}: pipeline of {LENGTHS[p]:>3} elements -> {steps:>2} steps, "
                  f"{real:>3} real rows delivered")


if __name__ == "__main__":
    main()
