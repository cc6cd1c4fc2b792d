"""Where processes leave each other messages: a small key-value interface, two implementations.

- :class:`CoordinationTransport`: the key-value store of JAX's coordination service (the one
  ``jax.distributed.initialize`` starts on process 0). Host RPCs, never a device collective, so an
  exchange never queues behind a training step on the accelerators.
- :class:`MemoryTransport`: the same operations on a dict shared by threads of one process, for
  testing the exchange protocol with hundreds of simulated processes in milliseconds.

Both count the bytes of keys and values they send and receive (``sent``, ``received``), which is
what flows through the coordinator.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class TransportTimeout(TimeoutError):
    """A blocking read found no value before its deadline."""


class TransportUnavailable(TransportTimeout):
    """The store could not be reached at all (the coordinator is gone), rather than the value
    not arriving in time."""


class TransportClosed(TransportUnavailable):
    """This process's own client was shut down (``jax.distributed.shutdown()``) during a read."""


class Transport(Protocol):
    """What an exchange needs from the store; one instance per process."""

    process_index: int
    process_count: int
    sent: int
    received: int

    def set(self, key: str, value: str) -> None: ...

    def set_once(self, key: str, value: str) -> bool:
        """Writes ``key`` only if it is absent; returns whether this call wrote it."""
        ...

    def get(self, key: str, timeout_s: float) -> str: ...

    def try_get(self, key: str) -> str | None: ...

    def dir_get(self, prefix: str) -> list[tuple[str, str]]: ...

    def increment(self, key: str) -> int: ...

    def delete(self, prefix: str) -> None: ...


class KeyValueClient(Protocol):
    """What a :class:`CoordinationTransport` calls of JAX's distributed runtime client."""

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None: ...

    def blocking_key_value_get(self, key: str, timeout_in_ms: int) -> str: ...

    def key_value_try_get(self, key: str) -> str: ...

    def key_value_dir_get(self, key: str) -> list[tuple[str, str]]: ...

    def key_value_increment(self, key: str, increment: int) -> int: ...

    def key_value_delete(self, key: str) -> None: ...


class CoordinationTransport:
    """The coordination service's key-value store, through this process's client.

    Example:
      Not run here: it needs ``jax.distributed.initialize()`` (a multi-process run).

      >>> transport = CoordinationTransport.of_this_process()   # doctest: +SKIP
      >>> transport.set("jaxload/example", "hello")               # doctest: +SKIP
    """

    def __init__(self, client: KeyValueClient, process_index: int, process_count: int):
        self._client = client
        self.process_index = process_index
        self.process_count = process_count
        self.sent = self.received = 0

    @classmethod
    def of_this_process(cls) -> CoordinationTransport:
        import jax

        from jaxload._src import compat

        client = compat.distributed_client()  # the public API has no accessor for it
        if client is None:
            raise RuntimeError(
                "jaxload needs jax.distributed.initialize() in multi-process runs "
                f"(process_count={jax.process_count()} but no distributed client)")
        return cls(client, jax.process_index(), jax.process_count())

    def set(self, key: str, value: str) -> None:
        self.sent += len(key) + len(value)
        self._client.key_value_set(key, value, allow_overwrite=True)

    def set_once(self, key: str, value: str) -> bool:
        self.sent += len(key) + len(value)
        try:
            self._client.key_value_set(key, value, allow_overwrite=False)
        except Exception as e:  # ALREADY_EXISTS
            if "ALREADY_EXISTS" in str(e):
                return False
            raise
        return True

    def get(self, key: str, timeout_s: float) -> str:
        self.sent += len(key)
        try:
            value = self._client.blocking_key_value_get(key, max(1, int(timeout_s * 1000)))
        except Exception as e:  # JaxRuntimeError DEADLINE_EXCEEDED, or the coordinator is gone
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            if "DEADLINE_EXCEEDED" in first:
                raise TransportTimeout(first) from e
            if first.startswith("CANCELLED"):
                raise TransportClosed(first) from e
            raise TransportUnavailable(first) from e
        self.received += len(value)
        return value

    def try_get(self, key: str) -> str | None:
        self.sent += len(key)
        try:
            value = self._client.key_value_try_get(key)
        except Exception:  # NOT_FOUND
            return None
        self.received += len(value)
        return value

    def dir_get(self, prefix: str) -> list[tuple[str, str]]:
        self.sent += len(prefix)
        entries = self._client.key_value_dir_get(prefix)
        self.received += sum(len(k) + len(v) for k, v in entries)
        return entries

    def increment(self, key: str) -> int:
        self.sent += len(key) + 8
        self.received += 8
        return self._client.key_value_increment(key, 1)

    def delete(self, prefix: str) -> None:
        self.sent += len(prefix)
        self._client.key_value_delete(prefix)


class MemoryStore:
    """A key-value store shared by the :class:`MemoryTransport`\\ s of simulated processes."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self._changed = threading.Condition()

    def transports(self, process_count: int) -> list[MemoryTransport]:
        """One transport per simulated process."""
        return [MemoryTransport(self, p, process_count) for p in range(process_count)]


class MemoryTransport:
    """:class:`Transport` over a :class:`MemoryStore`, with the coordination service's semantics
    (a key is also a directory: deleting it deletes every key under ``key/``).

    Example:
      >>> a, b = MemoryStore().transports(2)
      >>> a.set("jaxload/x", "1"); b.get("jaxload/x", timeout_s=1)
      '1'
    """

    def __init__(self, store: MemoryStore, process_index: int, process_count: int):
        self._store = store
        self.process_index = process_index
        self.process_count = process_count
        self.sent = self.received = 0

    def set(self, key: str, value: str) -> None:
        self.sent += len(key) + len(value)
        with self._store._changed:
            self._store.values[key] = value
            self._store._changed.notify_all()

    def set_once(self, key: str, value: str) -> bool:
        self.sent += len(key) + len(value)
        with self._store._changed:
            if key in self._store.values:
                return False
            self._store.values[key] = value
            self._store._changed.notify_all()
        return True

    def get(self, key: str, timeout_s: float) -> str:
        self.sent += len(key)
        deadline = time.monotonic() + timeout_s
        with self._store._changed:
            while key not in self._store.values:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TransportTimeout(f"no value for {key!r} after {timeout_s:g} s")
                self._store._changed.wait(left)
            value = self._store.values[key]
        self.received += len(value)
        return value

    def try_get(self, key: str) -> str | None:
        self.sent += len(key)
        with self._store._changed:
            value = self._store.values.get(key)
        self.received += len(value or "")
        return value

    def dir_get(self, prefix: str) -> list[tuple[str, str]]:
        self.sent += len(prefix)
        with self._store._changed:
            entries = [(k, v) for k, v in self._store.values.items()
                       if k.startswith(prefix.rstrip("/") + "/")]
        self.received += sum(len(k) + len(v) for k, v in entries)
        return entries

    def increment(self, key: str) -> int:
        self.sent += len(key) + 8
        self.received += 8
        with self._store._changed:
            value = int(self._store.values.get(key, "0")) + 1
            self._store.values[key] = str(value)
            self._store._changed.notify_all()
        return value

    def delete(self, prefix: str) -> None:
        self.sent += len(prefix)
        with self._store._changed:
            under = prefix.rstrip("/") + "/"
            for k in [k for k in self._store.values if k == prefix or k.startswith(under)]:
                del self._store.values[k]
