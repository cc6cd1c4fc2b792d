"""Wiring a JAX cluster of local processes: the environment each gets, and ``initialize()``.

``jaxload launch`` and :mod:`jaxload.testing` start processes with this environment; inside them
:func:`initialize` sets up ``jax.distributed`` from it. Outside such a launch it simply calls
``jax.distributed.initialize()`` (cluster auto-detection: SLURM, Open MPI, Cloud TPU, ...).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from jaxload._src.validate import is_positive_int

_ENV_PROCESSES = "JAXLOAD_NUM_PROCESSES"
_ENV_PROCESS_ID = "JAXLOAD_PROCESS_ID"
_ENV_COORDINATOR = "JAXLOAD_COORDINATOR"
_ENV_HEARTBEAT = "JAXLOAD_HEARTBEAT_TIMEOUT_S"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def initialize(*, heartbeat_timeout_s: int | None = None, **kwargs: Any) -> None:
    """Sets up ``jax.distributed`` for this process; call it before any other JAX work.

    Under ``jaxload launch`` (or :mod:`jaxload.testing`): the local CPU cluster described by the
    environment, with gloo CPU collectives (a single process needs no ``jax.distributed``);
    coordinates of its own are refused there. Anywhere else: ``jax.distributed.initialize(
    **kwargs)``, and where it finds no cluster and is given none, a ``ValueError`` that says
    how to start one.

    ``heartbeat_timeout_s``: how long a process may go without a heartbeat before JAX's
    coordination service declares it dead and ends every process (JAX's default: 100 s). A
    killed process cannot tell anyone; this is how soon the others learn of it, unless a
    launcher that sees the exit ends them first (``jaxload launch`` does). Too short a value
    ends healthy jobs whose processes pause (a long compile, a swapping host).

    Other keyword arguments go to ``jax.distributed.initialize``, e.g. JAX 0.12's mutual TLS
    options (``mtls_cert_file``, ``mtls_key_file``, ``mtls_ca_file``, ...), which keep anyone who
    can reach the coordinator's port from joining the job or writing into its key-value store.

    Example:
      The first thing in a training script, before any other JAX call (not run here: the
      examples run in one process that is no member of a cluster and has used its devices):

      >>> jaxload.initialize(heartbeat_timeout_s=30)   # doctest: +SKIP

      Bad values are refused before ``jax.distributed`` is touched:

      >>> jaxload.initialize(heartbeat_timeout_s=0)
      Traceback (most recent call last):
      ...
      ValueError: heartbeat_timeout_s=0 must be a positive int (seconds)
    """
    import jax

    kwargs = _distributed_options(heartbeat_timeout_s, kwargs)
    if _ENV_PROCESSES not in os.environ:
        try:
            jax.distributed.initialize(**kwargs)
        except ValueError as e:  # JAX found no cluster and was told none
            if {"coordinator_address", "num_processes", "process_id"} <= set(kwargs):
                raise
            raise ValueError(
                f"jaxload.initialize() found no cluster to join ({e}): JAX detects SLURM, "
                "Cloud TPU VMs, Kubernetes and Open MPI by themselves. On one machine, run the "
                "script under `jaxload launch -n 2 --local-devices 4 -- python train.py`; "
                "elsewhere pass coordinator_address=, num_processes= and process_id=; a single "
                "process needs no jaxload.initialize()") from e
        return
    _initialize_launched(kwargs)


def _distributed_options(heartbeat_timeout_s: int | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``initialize``'s options as ``jax.distributed.initialize`` takes them; bad values and
    options this JAX does not know are refused before ``jax.distributed`` is touched."""
    import inspect

    import jax

    options = dict(kwargs)
    if heartbeat_timeout_s is not None:
        if not is_positive_int(heartbeat_timeout_s):
            raise ValueError(f"heartbeat_timeout_s={heartbeat_timeout_s!r} must be a positive "
                             "int (seconds)")
        options["heartbeat_timeout_seconds"] = heartbeat_timeout_s
    accepted = inspect.signature(jax.distributed.initialize).parameters
    unknown = sorted(k for k in options if k not in accepted)
    if unknown:
        hint = (" (mutual TLS needs JAX >= 0.12; on older JAX keep the coordinator on a private "
                "network)" if any(k.startswith("mtls") for k in unknown) else "")
        raise TypeError(f"jax.distributed.initialize of JAX {jax.__version__} does not take "
                        f"{unknown}{hint}")
    return options


def _initialize_launched(options: dict[str, Any]) -> None:
    """The local CPU cluster this process's environment describes (``jaxload launch``), with
    gloo CPU collectives; a single process needs no ``jax.distributed``."""
    import jax

    given = [key for key in ("coordinator_address", "num_processes", "process_id") if key in options]
    if given:
        raise ValueError(
            f"jaxload.initialize({', '.join(f'{key}=...' for key in given)}) under jaxload launch "
            "(or jaxload.testing), which gives every process the cluster's coordinates itself: "
            f"call jaxload.initialize() without {', '.join(given)} (keep them where you start "
            "the processes by hand)")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    num_processes = int(os.environ[_ENV_PROCESSES])
    if num_processes <= 1:
        return
    heartbeat = os.environ.get(_ENV_HEARTBEAT)
    if heartbeat and "heartbeat_timeout_seconds" not in options:
        options["heartbeat_timeout_seconds"] = int(heartbeat)
    options.setdefault("initialization_timeout", 60)
    # JAX binds the coordination service to every interface ([::]:PORT) by default, with no
    # authentication: anyone who can reach the machine could join or write keys. A local
    # cluster needs loopback only.
    options.setdefault("coordinator_bind_address", os.environ[_ENV_COORDINATOR])
    jax.distributed.initialize(
        coordinator_address=os.environ[_ENV_COORDINATOR],
        num_processes=num_processes,
        process_id=int(os.environ[_ENV_PROCESS_ID]),
        **options,
    )


def cpu_client_threads(local_devices: int, env: dict[str, str] | None = None) -> str:
    """``NPROC`` for a process with ``local_devices`` fake CPU devices: at least twice as many.

    XLA:CPU sizes the thread pool that launches and runs computations by ``NPROC`` (else the
    machine's core count), at least one thread per device. A loop that dispatches steps ahead
    fills each device's queue of in-flight computations (32); the next step's launch then waits
    for a slot *on a pool thread*. With fewer than ``2 x local_devices`` threads, those waiting
    launches and the devices already inside a cross-process collective (gloo) can take every
    thread, so the device the collective waits for never runs: a deadlock after ~30-100 steps.

    Example:
      >>> int(cpu_client_threads(4, {"NPROC": "2"})) >= 8
      True
    """
    values: Mapping[str, str] = os.environ if env is None else env
    nproc = values.get("NPROC") or ""
    current = int(nproc) if nproc.isdigit() else 0
    return str(max(current, os.cpu_count() or 1, 2 * local_devices))


def process_env(process_id: int, num_processes: int, local_devices: int, port: int,
                heartbeat_timeout_s: int | None = None) -> dict[str, str]:
    """The environment of one local process: fake CPU devices and the cluster's coordinates,
    and enough XLA:CPU client threads for steps dispatched far ahead
    (:func:`cpu_client_threads`)."""
    env = dict(os.environ)
    if heartbeat_timeout_s:
        env[_ENV_HEARTBEAT] = str(int(heartbeat_timeout_s))
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    env.update(
        XLA_FLAGS=" ".join(flags + [f"--xla_force_host_platform_device_count={local_devices}"]),
        JAX_PLATFORMS="cpu",
        NPROC=cpu_client_threads(local_devices, env),
        PYTHONUNBUFFERED="1",
        TF_CPP_MIN_LOG_LEVEL=env.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        **{
            _ENV_PROCESSES: str(num_processes),
            _ENV_PROCESS_ID: str(process_id),
            _ENV_COORDINATOR: f"127.0.0.1:{port}",
        },
    )
    return env
