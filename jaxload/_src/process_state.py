"""What jaxload keeps in a process between loaders, made fresh again between the calls of a warm
test cluster (:mod:`jaxload._src.warm_cluster`), and what a call left behind.

A process that runs many calls must start each as a new process would: the processes agree on
exchange names by counting what each created (:data:`whereabouts.CREATED`), so counts left by
an earlier call, on one process only, would put the processes out of step. And a call that
leaves a loader open, a thread running or a key in the coordination service's store would change
what the next call sees: :func:`leftovers` names them.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

from jaxload._src import peers, prefetch, told, watchdog, whereabouts

KEY_PREFIX = "jaxload/"  # everything jaxload keeps in the coordination service's store
THREAD_PREFIX = "jaxload-"  # the names of jaxload's threads
_SETTLE_S = 5.0  # how long a thread that is ending anyway may take
_SHOWN = 10
_WHY = {"jaxload-exit": " (a failure with on_failure='exit' ends this process soon: pass "
                        "on_failure='raise', or run the call on processes of its own)"}



def reset() -> None:
    """Forgets the names, the store client and the warnings told once: the process is as new."""
    whereabouts.forget_names()
    peers.forget_transport()
    told.forget()


def leftovers(timeout_s: float) -> list[str]:
    """Ends what a call dropped and names what it left: passes still open, jaxload threads
    still running. Dropped iterators are closed (waiting ``timeout_s`` at most, as their passes
    may wait on the other processes) and this process's watchdog is stopped."""
    gc.collect()  # finalizers hand dropped iterators to the closing thread
    prefetch.closer.drain(timeout_s)
    prefetch.releaser.drain(timeout_s)  # after the closes, which may release iterators
    found = [f"loader pass {name!r} still open" for name in watchdog.forget_this_process()]
    deadline = time.monotonic() + min(_SETTLE_S, timeout_s)
    while _jaxload_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    found += [f"thread {name!r} still running{_WHY.get(name, '')}" for name in _jaxload_threads()]
    return found


def stray_keys(client: Any) -> list[str]:
    """The keys under ``jaxload/`` in the coordination service's store (``client``: JAX's
    ``DistributedRuntimeClient``), the first ten and how many more."""
    keys = sorted(key for key, _ in client.key_value_dir_get(KEY_PREFIX))
    shown = [f"key {key!r} in the coordination service's store" for key in keys[:_SHOWN]]
    if len(keys) > _SHOWN:
        shown.append(f"and {len(keys) - _SHOWN} more keys under {KEY_PREFIX!r}")
    return shown


def _jaxload_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate()
                  if t.name.startswith(THREAD_PREFIX) and t.is_alive())
