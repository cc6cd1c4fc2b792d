"""What a process says of the tf.data pipeline it splits, for the processes to compare in a
pass's first round (:mod:`jaxload._src.same_dataset`): what the graph cannot show.

The graph shows most of what can give the processes different orders (an unseeded shuffle, an
unordered interleave; :func:`~jaxload._src.pipelines.tf.order.order_varying`), but not a
generator that yields in another order, a ``py_function``, a glob listed in another order, or
an op jaxload does not know, nor the contents of the arrays it starts from. So, split by files,
each process hashes the file names it deals out (:mod:`~jaxload._src.pipelines.tf.names`, while
counting them); split by elements, the arrays under the pipeline (``from_tensor_slices``,
``from_tensors``: ids shuffled in Python or listed per host differ there), where the graph cannot
show the order (:func:`~jaxload._src.pipelines.tf.order.unseen_order`) the first elements of the
whole pipeline, read once per loader from its start with a second iterator
(:data:`ELEMENTS_HASHED` at most: benchmarks/order_check.py gives the cost), and always the
pipeline's structure (:func:`~jaxload._src.pipelines.tf.order.structure`: an
interleave's cycle length set from the CPU count shows there); split at the user's
``SHARD_HINT``, that structure only. They must be equal on every process.

Example:
  >>> import tensorflow as tf
  >>> from jaxload._src.pipelines.tf.split import Sharding
  >>> plan = jaxload.data_parallel(devices=jaxload.simulated_devices(2, 4)).plan(
  ...     global_batch_size=8, process_index=0)
  >>> ds = tf.data.Dataset.from_tensor_slices(np.arange(100))
  >>> probe = Probe(ds, plan, Sharding("elements"), batched=False, unseen=["GeneratorDataset"])
  >>> same = probe.described()["same"]
  >>> same["split"], same["pipeline"], same["source rows"]
  ('elements', None, '1 arrays of 100 rows, hashed ...')
  >>> same["first elements"]
  '8 hashed: ...'
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
from typing import Any

import numpy as np
import xxhash

from jaxload._src import compat, fingerprints
from jaxload._src.pipelines.tf.decide import ELEMENTS, FILES, HINT
from jaxload._src.pipelines.tf.graph import DatasetGraph
from jaxload._src.pipelines.tf.order import constants, structure, value_varying
from jaxload._src.pipelines.tf.split import Sharding
from jaxload._src.plan import Plan
from jaxload._src.same_dataset import Described

ELEMENTS_HASHED = 16  # at most, split by elements (fewer where a global batch is smaller)
_BATCHES_HASHED = 4  # elements that are batches already (batched=True)


def _local_sizes(names: tuple[str, ...]) -> str | None:
    """The sizes of those of ``names`` that are files on this host's disk (paths without a
    scheme such as ``gs://``: each host's disk may hold other files under the same names), or
    None where none is.

    Example:
      >>> _local_sizes(("gs://bucket/part-0",)) is None
      True
    """
    sizes = []
    for name in names:
        try:
            if "://" not in name and os.path.isfile(name):
                sizes.append(os.path.getsize(name))
        except OSError:  # gone, or not readable, since it was listed: not sampled
            continue
    return f"{len(sizes)} of the first files, of {sizes} bytes" if sizes else None


class Probe:
    """This process's description of the pipeline it splits (see the module)."""

    def __init__(self, ds: Any, plan: Plan, sharding: Sharding, batched: bool,
                 unseen: list[str] | None = None, sources: Any = None,
                 graph: DatasetGraph | None = None):
        self._ds, self._plan, self._sharding, self._batched = ds, plan, sharding, batched
        self._sources = ds if sources is None else sources  # the user's own dataset objects
        self._constants = None if graph is None else constants(graph)  # seeds, sizes, ...
        self._unseen = unseen  # what the graph cannot show of its order (None: unknown)
        self._structure = None if graph is None else structure(graph)  # its ops and cycles
        self._random = [] if graph is None else value_varying(graph)  # random ops, no seed
        self._found: dict[str, Any] | None = None
        self._fingerprint: str | None = None

    def described(self, seed: int = 0) -> dict[str, Any] | None:
        """The description (JSON), or None where nothing is split between loading groups;
        computed once per loader, before its first pass's first round (the same whatever the
        pass's ``seed``)."""
        plan, sharding = self._plan, self._sharding
        if plan.shard_count == 1 or sharding.mode not in (FILES, ELEMENTS, HINT):
            return None
        if self._found is None:
            same: dict[str, str | None]
            files = None
            # how it is split first: a process that splits by files and one that falls back
            # to elements (each host listing its own files, in other numbers) describe
            # nothing else alike
            if sharding.mode == FILES and sharding.names is not None:
                names = sharding.names
                same = {"split": FILES, "file names": f"{names.count} from {names.first!r}, "
                                                      f"hashed: {names.digest}",
                        "local files": _local_sizes(names.head)}
                files = [names.meant, names.read]
            elif sharding.mode == HINT:  # the user's split: how, and over what ops
                same = {"split": HINT, "pipeline": self._structure}
            else:
                same = {"split": sharding.mode, "pipeline": self._structure,
                        "source rows": self._source_rows,
                        "first elements": None if self._unseen == [] else self._elements()}
            self._found = Described(same, plan.shard_index, plan.shard_count,
                                    files=files).to_json()
        return self._found

    def fingerprint(self) -> str:
        """What a state records of the pipeline, checked when it is restored: its structure, its
        constants (seeds, sizes) and the arrays under it (16 hex digits); computed once (each
        get_state asks)."""
        if self._fingerprint is None:
            digest = hashlib.blake2b(digest_size=8)
            digest.update(repr((self._structure, self._constants, self._source_rows)).encode())
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    @functools.cached_property  # on the probe: a cache on the method would keep every probe,
    def _source_rows(self) -> str | None:  # and the arrays under its pipeline, for good
        """A hash of the arrays under the pipeline (its ``from_tensor_slices`` and
        ``from_tensors``: ids shuffled or listed per host differ here), XXH3 of their bytes; None
        where there are none. About 0.1 s per GB, once per loader."""
        tensors = compat.tf_source_tensors(self._sources)
        if not tensors:
            return None
        digest, rows = xxhash.xxh3_64(), 0
        for tensor in tensors:
            array = np.asarray(tensor)  # a view of the tensor's buffer on CPU, no copy
            rows += array.shape[0] if array.ndim else 1
            if array.dtype == object:  # strings (file names)
                digest.update(f"{array.shape};".encode())
                digest.update(b"".join(len(b).to_bytes(8, "little") + b for b in array.ravel()))
            else:
                fingerprints.add(digest, array)
        return f"{len(tensors)} arrays of {rows} rows, hashed {digest.hexdigest()}"

    def _elements(self) -> str:
        """A hash of the pipeline's first elements, read from its start under its trailing
        ``map``\\ s (a random augmentation there draws other values on each process, on the
        same rows)."""
        import tensorflow as tf

        n = _BATCHES_HASHED if self._batched else min(ELEMENTS_HASHED,
                                                      self._plan.global_batch_size)
        ds = self._ds
        while (peeled := compat.tf_one_to_one(ds)) is not None:
            ds = peeled[0]
        ds = ds.with_options(self._ds.options())  # the user's, as the pipeline runs them
        digest = hashlib.blake2b(digest_size=8)
        count = 0
        for element in itertools.islice(ds.as_numpy_iterator(), n):  # no ops added
            for leaf in tf.nest.flatten(element):
                array = np.ascontiguousarray(leaf)
                digest.update(f"{array.dtype.str}{array.shape}".encode())
                digest.update(array.tobytes() if array.dtype != object else repr(array).encode())
            count += 1
        drawn = f" (read after {self._random[0].split(':')[0]}, which draws other values on " \
                "each process before the last maps: give it a seed)" if self._random else ""
        return f"{count} hashed: {digest.hexdigest()}{drawn}"
