"""What a process says of the tf.data pipeline it splits, for the processes to compare in a
pass's first round (:mod:`jaxload._src.same_dataset`): what the graph cannot show.

The graph shows most of what can give the processes different orders (an unseeded shuffle, an
unordered interleave; :func:`~jaxload._src.pipelines.tf_order.order_varying`), but not a
generator that yields in another order, a ``py_function``, a glob listed in another order, or
an op jaxload does not know. So, split by files, each process hashes the file names it deals
out (:mod:`~jaxload._src.pipelines.tf_names`); split by elements, the first elements of the
whole pipeline, read once per loader from its start (a second iterator: :data:`ELEMENTS_HASHED`
elements at most). The hashes must be equal on every process.

Example:
  >>> import tensorflow as tf
  >>> from jaxload._src.pipelines.tf_files import Sharding
  >>> plan = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4)).plan(
  ...     global_batch_size=8, process_index=0)
  >>> probe = Probe(tf.data.Dataset.range(100), plan, Sharding("elements"), batched=False)
  >>> probe.described()["same"]
  {'first elements': '8 hashed: ...'}
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from jaxload._src.pipelines.tf_files import ELEMENTS, FILES, Sharding
from jaxload._src.plan import Plan
from jaxload._src.same_dataset import Described

ELEMENTS_HASHED = 64  # at most, split by elements (fewer where a global batch is smaller)
_BATCHES_HASHED = 4  # elements that are batches already (batched=True)


class Probe:
    """This process's description of the pipeline it splits (see the module)."""

    def __init__(self, ds: Any, plan: Plan, sharding: Sharding, batched: bool):
        self._ds, self._plan, self._sharding, self._batched = ds, plan, sharding, batched
        self._found: dict[str, Any] | None = None

    def described(self) -> dict[str, Any] | None:
        """The description (JSON), or None where nothing is split between loading groups;
        computed once per loader, before its first pass's first round."""
        plan, sharding = self._plan, self._sharding
        if plan.shard_count == 1 or sharding.mode not in (FILES, ELEMENTS):
            return None
        if self._found is None:
            if sharding.mode == FILES and sharding.names is not None:
                names = sharding.names
                same = {"file names": f"{names.count} from {names.first!r}, hashed: "
                                      f"{names.digest}"}
            else:
                same = {"first elements": self._elements()}
            self._found = Described(same, plan.shard_index, plan.shard_count).to_json()
        return self._found

    def _elements(self) -> str:
        """A hash of the pipeline's first elements, read from its start."""
        n = _BATCHES_HASHED if self._batched else min(ELEMENTS_HASHED,
                                                      self._plan.global_batch_size)
        digest = hashlib.blake2b(digest_size=8)
        count = 0
        for batch in self._ds.take(n).batch(n).as_numpy_iterator():
            for leaf in _leaves(batch):
                array = np.ascontiguousarray(leaf)
                count = len(array)
                digest.update(f"{array.dtype.str}{array.shape}".encode())
                digest.update(array.tobytes() if array.dtype != object else repr(array).encode())
        return f"{count} hashed: {digest.hexdigest()}"


def _leaves(batch: Any) -> list[Any]:
    import tensorflow as tf

    return list(tf.nest.flatten(batch))
