"""Run-time proof that devices hold the data they should, which JAX itself cannot tell.

- :func:`replication`: devices that hold the same rows of a global array (model replicas, or a
  replicated array) hold identical bytes. Catches a process of a replica group that loaded other
  data than its partners (the JAX guide: "JAX cannot detect if jax.Array shards across processes
  are supposed to be replicated but aren't, and will produce wrong results").
- :func:`distinct`: devices that hold different rows of a batch do not hold identical data.
  Catches the commonest bug of all: every process loading the same data because the pipeline
  was not sharded, or was sharded by process index instead of by loading group.
- :func:`plan`: every process computed the same layout and global batch size.

Each check fingerprints every addressable shard on the host (XXH3-64 of its bytes, shape and
dtype: the same on every process and machine), exchanges the fingerprints between processes in
one round through JAX's coordination service, and compares them. Every process reaches the same
verdict and raises the same error. ``benchmarks/check_cost.py`` measures what a check costs.

Every process must run the same checks in the same order. Each check's exchange is named by the
line of the program that called it and how many times that line has (or by ``name=``, the same
on every process): a check that some processes skip is named within seconds as processes out of
step (:class:`~jaxload.OutOfStepError`), not after ``timeout_s``.

A loader runs :func:`plan` and :func:`batch` on the first step of each pass (``checks=``).

Example:
  >>> layout = jaxload.data_parallel()
  >>> batch = {"x": jax.device_put(np.arange(16.0), layout.sharding)}
  >>> jaxload.check.batch(batch)                          # silent: each device its own rows
  >>> jaxload.check.plan(layout, global_batch_size=16)    # silent: one layout everywhere
"""

from jaxload._src import exports
from jaxload._src.check import (
    CheckError,
    DuplicationError,
    PlanMismatchError,
    ReplicationError,
    batch,
    distinct,
    fingerprint,
    plan,
    replication,
)

__all__ = (
    "CheckError",
    "DuplicationError",
    "PlanMismatchError",
    "ReplicationError",
    "batch",
    "distinct",
    "fingerprint",
    "plan",
    "replication",
)

exports.claim(__name__, globals(), __all__)
