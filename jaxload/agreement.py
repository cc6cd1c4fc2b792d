"""Step agreement: before a step is handed out, every process learns what every other one has.

Each process publishes a short payload per step (does it have a batch, of which shapes) in the
key-value store of JAX's distributed runtime (the coordination service that
``jax.distributed.initialize`` starts), waits at a barrier, and reads everyone's payload. This runs
on the host over the coordinator's RPC channel, not as a device collective, so it never queues
behind a training step on the accelerators, and every wait is bounded by ``timeout_s``.
"""

from __future__ import annotations

import itertools
import uuid

import jax

_loader_ids = itertools.count()
_CHUNK = 64  # steps whose keys are deleted together, one RPC per chunk instead of one per step


class PeerTimeoutError(RuntimeError):
    """Some processes did not reach a step's agreement in time (dead, stuck or slow), or the
    coordinator could not be reached."""


def next_loader_id() -> int:
    """Loaders are numbered in creation order, which must be the same on every process."""
    return next(_loader_ids)


def shared_token(name: str, timeout_s: float) -> str:
    """A random token that process 0 draws and every process reads: the same on all processes
    of this run, different in the next run (e.g. to name a tf.data service job)."""
    if jax.process_count() == 1:
        return uuid.uuid4().hex[:12]
    client, key = _client(), f"jaxload/token/{name}"
    if jax.process_index() == 0:
        client.key_value_set(key, uuid.uuid4().hex[:12])
    try:
        return client.blocking_key_value_get(key, max(1, int(timeout_s * 1000)))
    except Exception as e:
        raise PeerTimeoutError(f"process {jax.process_index()} waited {timeout_s:g} s for "
                               f"process 0 to publish {key!r}: {e}") from e


def _client():
    from jax._src import distributed  # the public API has no accessor for the runtime client

    return distributed.global_state.client


class StepAgreement:
    """Exchanges one payload per process per step, keyed by ``name`` (same on all processes).

    Example:
      >>> agreement = StepAgreement("loader0.epoch0", timeout_s=60)
      >>> agreement.exchange(step=0, payload="ok")   # single process
      {0: 'ok'}
    """

    def __init__(self, name: str, timeout_s: float):
        self._name = name
        self._timeout_ms = max(1, int(timeout_s * 1000))
        self._process_index = jax.process_index()
        self._process_count = jax.process_count()
        self._client = _client() if self._process_count > 1 else None
        if self._process_count > 1 and self._client is None:
            raise RuntimeError(
                "jaxload needs jax.distributed.initialize() in multi-process runs "
                f"(process_count={self._process_count} but no distributed client)"
            )

    def _key(self, step: int) -> str:
        return f"jaxload/{self._name}/{step // _CHUNK}/{step}"

    def exchange(self, step: int, payload: str) -> dict[int, str]:
        """Publishes ``payload`` for ``step`` and returns every process's payload by index."""
        if self._client is None:
            return {self._process_index: payload}
        key = self._key(step)
        try:
            self._client.key_value_set(f"{key}/{self._process_index}", payload)
            self._client.wait_at_barrier(key, self._timeout_ms)
            entries = self._client.key_value_dir_get(key)
            if step % _CHUNK == 0 and step and self._process_index == 0:
                # everyone has passed this step's barrier, so the previous chunk was read by all
                self._client.key_value_delete(f"jaxload/{self._name}/{step // _CHUNK - 1}")
        except Exception as e:  # the runtime raises JaxRuntimeError (DEADLINE_EXCEEDED, ...)
            raise self._timeout_error(step, key, e) from e
        return {int(k.rsplit("/", 1)[1]): v for k, v in entries}

    def _timeout_error(self, step: int, key: str, cause: Exception) -> PeerTimeoutError:
        try:
            arrived = {int(k.rsplit("/", 1)[1]) for k, _ in self._client.key_value_dir_get(key)}
        except Exception:  # the coordinator itself may be gone
            arrived = set()
        missing = sorted(set(range(self._process_count)) - arrived)
        if arrived:
            who = f"processes {missing} did not arrive"
        else:
            who = f"the coordinator (process 0) did not answer ({str(cause).splitlines()[0]})"
        return PeerTimeoutError(
            f"process {self._process_index} waited for the other processes at step {step} of "
            f"loader {self._name!r} (timeout_s={self._timeout_ms / 1000:g}): {who}. A process "
            "died, hangs in its input pipeline, or stopped iterating this loader (every process "
            "must iterate every loader in the same order)."
        )
