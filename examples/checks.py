"""The run-time checks catching the two classic data-loading bugs, in real processes.

1. Model replicas across processes (4 processes x 2 devices), pipeline sharded by process index
   instead of by loading group: replicas get different data -> ReplicationError.
2. Data parallelism (2 processes x 4 devices), every process loading the same data: different
   replicas get identical batches -> DuplicationError.
Both are caught by the loader's default first-step check. Run: .venv/bin/python examples/checks.py
"""

from __future__ import annotations

import textwrap

import jaxload.testing


def first_step(layout_name: str):
    import grain
    import jax

    import jaxload

    layout = {"across": lambda: jaxload.model_replicas_across_processes(2),
              "data_parallel": jaxload.data_parallel}[layout_name]()
    source = grain.MapDataset.range(1024).map(lambda i: {"id": i})
    if layout_name == "across":  # the bug: shard by process, not by loading group
        ds = source[jax.process_index()::jax.process_count()]
    else:  # the bug: no sharding at all
        ds = source
    loader = jaxload.from_grain(ds, layout, global_batch_size=16, shard=False)
    try:
        next(iter(loader))
    except ValueError as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def main():
    for layout_name, (n, d) in (("across", (4, 2)), ("data_parallel", (2, 4))):
        errors = jaxload.testing.run(first_step, num_processes=n, local_devices=d,
                                     args=(layout_name,))
        raised = sum(e != "no error" for e in errors)
        print(f"{layout_name}, {n} processes x {d} devices: {raised} of {n} processes raised; "
              "process 0 says")
        print(textwrap.fill(errors[0], width=96, initial_indent="  ", subsequent_indent="  "))


if __name__ == "__main__":
    main()
