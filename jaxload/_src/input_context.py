"""What ``from_tf_data(dataset_fn, ...)`` tells ``dataset_fn``: which loading group's share to
build, and its batch sizes (as tf.distribute's ``InputContext`` does for
``distribute_datasets_from_function``)."""

from __future__ import annotations

import dataclasses

from jaxload._src.plan import Plan


@dataclasses.dataclass(frozen=True)
class InputContext:
    """The loading group whose share ``dataset_fn(ctx)`` builds.

    Attributes:
      shard_index: this process's loading group (``plan.shard_index``): shard by it, never by
        ``jax.process_index()`` (processes of one group must read identical rows).
      shard_count: the number of loading groups.
      local_batch_size: rows per step this process loads (batch to it, or let jaxload).
      global_batch_size: rows per step over all devices.
      plan: the whole :class:`~jaxload.Plan`.

    ``num_input_pipelines`` and ``input_pipeline_id`` are tf.distribute's names for the first
    two.

    Example:
      >>> import tensorflow as tf
      >>> def dataset_fn(ctx):
      ...     files = tf.data.Dataset.range(16)            # e.g. list_files(..., shuffle=False)
      ...     return files.shard(ctx.shard_count, ctx.shard_index).map(lambda i: {"x": i})
      >>> loader = jaxload.from_tf_data(dataset_fn, jaxload.data_parallel(), global_batch_size=8)
      >>> print(np.asarray(next(iter(loader))["x"]))
      [0 1 2 3 4 5 6 7]
    """

    shard_index: int
    shard_count: int
    local_batch_size: int
    global_batch_size: int
    plan: Plan = dataclasses.field(repr=False)

    @classmethod
    def of(cls, plan: Plan) -> InputContext:
        return cls(plan.shard_index, plan.shard_count, plan.local_batch_size,
                   plan.global_batch_size, plan)

    @property
    def num_input_pipelines(self) -> int:
        return self.shard_count

    @property
    def input_pipeline_id(self) -> int:
        return self.shard_index
