"""The Loader: per-process numpy batches in, global ``jax.Array`` batches out, in lockstep.

Every step, before anything touches a device, all processes agree (:mod:`jaxload.agreement`)
that each of them has a batch and that the batches have the same structure, shapes and dtypes.
The first step that some process cannot fill ends the epoch on every process, so a process that
runs out of data early never leaves the others blocked in a collective.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax

from jaxload import agreement
from jaxload.assemble import build_global, check_local_batch
from jaxload.layouts import Layout, Plan

PyTree = Any

DEFAULT_TIMEOUT_S = 600.0

_NO_BATCH = "end"
_FAILED = "failed"


class Loader:
    """An iterable of global batches (pytrees of ``jax.Array``), one pass per ``iter()``.

    Built by :func:`jaxload.from_tf_data` or :func:`jaxload.from_grain`. Every process must
    iterate every loader in the same order (as with any multi-process JAX computation).

    Attributes:
      layout: the layout the batches are placed on.
      plan: this process's loading plan (``shard_index``, ``local_batch_size``, ...).

    Example:
      >>> loader = jaxload.from_tf_data(ds, jaxload.data_parallel(), global_batch_size=64)
      >>> for batch in loader:
      ...     state = train_step(state, batch)
    """

    def __init__(
        self,
        local_batches: Callable[[], Iterator[PyTree]],
        layout: Layout,
        plan: Plan,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        """``local_batches()`` starts a new pass and yields this process's numpy batches."""
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        self.layout = layout
        self.plan = plan
        self._local_batches = local_batches
        self._timeout_s = timeout_s
        self._id = agreement.next_loader_id()
        self._passes = 0

    def __repr__(self) -> str:
        p = self.plan
        return (
            f"Loader(global_batch_size={p.global_batch_size}, local_batch_size="
            f"{p.local_batch_size}, shard_index={p.shard_index}, shard_count={p.shard_count})"
        )

    def __iter__(self) -> Iterator[PyTree]:
        steps = agreement.StepAgreement(f"{self._id}.{self._passes}", self._timeout_s)
        self._passes += 1
        local_batches = self._local_batches()
        for step in range(2**63):
            try:
                local = next(local_batches, None)
                named = None if local is None else check_local_batch(local, self.plan)
            except Exception as e:
                steps.exchange(step, f"{_FAILED}|{type(e).__name__}: {e}")
                raise
            payloads = steps.exchange(step, _NO_BATCH if named is None else _signature(named))
            if not _all_have_batches(payloads, step):
                return
            yield build_global(jax.tree_util.tree_structure(local), [a for _, a in named], self.plan)


def _signature(named) -> str:
    return ";".join(f"{name}:{array.dtype}{list(array.shape)}" for name, array in named)


def _all_have_batches(payloads: dict[int, str], step: int) -> bool:
    """False at the end of data; raises if a process failed or the processes' batches differ."""
    failed = {p: v.split("|", 1)[1] for p, v in payloads.items() if v.startswith(_FAILED)}
    if failed:
        p, message = min(failed.items())
        raise RuntimeError(f"process {p} failed while loading step {step}: {message}")
    if any(v == _NO_BATCH for v in payloads.values()):
        return False
    kinds: dict[str, list[int]] = {}
    for p, signature in sorted(payloads.items()):
        kinds.setdefault(signature, []).append(p)
    if len(kinds) > 1:
        described = "\n".join(f"  processes {ps}: {sig}" for sig, ps in kinds.items())
        raise ValueError(
            f"at step {step} the processes' batches differ in structure, shape or dtype, so "
            f"they cannot form one global batch:\n{described}"
        )
    return True
