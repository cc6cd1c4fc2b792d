"""Grain adapter. Grain is imported only when a Grain dataset is passed in."""

from __future__ import annotations

from typing import Any

from jaxload.adapters.stack import stack_elements
from jaxload.layouts import Layout
from jaxload.loader import DEFAULT_TIMEOUT_S, Loader, check_period, check_prefetch
from jaxload.remainder import DROP, check_remainder


def from_grain(
    ds: Any,
    layout: Layout,
    *,
    global_batch_size: int,
    shard: bool = True,
    remainder: str = DROP,
    batched: bool = False,
    checks: str | int = "first",
    prefetch: int = 2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Loader:
    """A :class:`~jaxload.Loader` of global batches from an unbatched Grain dataset.

    A ``grain.MapDataset`` is sharded by loading group (``ds[plan.shard_index::plan.shard_count]``:
    processes that need the same rows read the same elements), batched to
    ``plan.local_batch_size`` rows (the incomplete last batch dropped or padded), and each per-process
    batch becomes one global ``jax.Array`` per feature on ``layout.sharding``.

    Args:
      ds: an unbatched ``grain.MapDataset``, or a ``grain.IterDataset`` with ``shard=False``.
        Elements are numpy arrays/scalars or dicts, tuples and nested structures of them.
      layout: where the batches go (``jaxload.data_parallel()``, ...).
      global_batch_size: rows per step over all devices.
      shard: ``False`` if ``ds`` already holds only this loading group's elements; jaxload then
        only batches. An ``IterDataset`` cannot be sharded by index without reading every
        element, so shard its source ``MapDataset`` first
        (``source[plan.shard_index::plan.shard_count]``) and pass ``shard=False``.
      remainder: ``"drop"`` (default) ends the epoch on every process at the first step some
        process cannot fill; ``"pad"`` goes on until every process is exhausted, zero-fills the
        missing rows and adds a bool ``"mask"`` feature (dict elements only). See
        :mod:`jaxload.remainder`.
      batched: ``True`` if ``ds`` already yields per-process batches of
        ``plan.local_batch_size`` rows; a batch with another leading dim is refused before any
        device work. With ``shard=True`` whole batches are then dealt out to the loading groups.
      checks: when to verify placement at run time: ``"first"`` step of each pass (default),
        every N steps (an int), or ``"never"``. See :class:`~jaxload.Loader`.
      prefetch: global batches assembled ahead on a background thread while the training step
        runs (default 2; 0 turns it off).
      timeout_s: how long a process waits for the others at each step before raising.

    Example:
      >>> ds = grain.MapDataset.range(1024).map(lambda i: {"x": np.float32(i)})
      >>> loader = jaxload.from_grain(ds, jaxload.data_parallel(), global_batch_size=128)
      >>> next(iter(loader))["x"].shape
      (128,)
    """
    import grain

    check_remainder(remainder)
    check_period(checks)
    check_prefetch(prefetch)
    plan = layout.plan(global_batch_size)
    if isinstance(ds, grain.MapDataset):
        if shard:
            ds = ds[plan.shard_index :: plan.shard_count]
        ds = ds.to_iter_dataset()
    elif isinstance(ds, grain.IterDataset):
        if shard:
            raise ValueError(
                "from_grain got a grain.IterDataset with shard=True; an IterDataset cannot be "
                "sharded by index without reading every element. Shard its source MapDataset "
                f"(source[{plan.shard_index}::{plan.shard_count}] for this process, from "
                "layout.plan(global_batch_size)) before .to_iter_dataset(), and pass shard=False."
            )
    else:
        raise TypeError(
            "from_grain expects a grain.MapDataset or grain.IterDataset, got "
            f"{type(ds).__name__}"
        )
    if not batched:
        ds = ds.batch(plan.local_batch_size, drop_remainder=remainder == DROP,
                      batch_fn=stack_elements)

    def local_batches(position: dict | None):
        """This group's batches with Grain's own iterator state after each one."""
        iterator = iter(ds)
        if position is not None:
            iterator.set_state(position)
        for batch in iterator:
            yield batch, iterator.get_state()

    return Loader(local_batches, layout, plan, backend="grain", remainder=remainder,
                  checks=checks, prefetch=prefetch, timeout_s=timeout_s)
