"""Topologies: which device sits on which process.

Planning reads only a device's ``id`` and ``process_index``, so it runs the same on real devices
(``jax.devices()``) and on a simulated topology (:func:`simulated_devices`): a 512-process plan
can be computed without starting a process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

import jax

from jaxload._src.validate import positive_int


class Device(Protocol):
    """What planning reads of a device: a ``jax.Device`` or a :class:`SimulatedDevice`."""

    @property
    def id(self) -> int: ...

    @property
    def process_index(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class SimulatedDevice:
    """A stand-in for a ``jax.Device`` on a topology that is planned but not started.

    Example:
      >>> devices = jaxload.simulated_devices(num_processes=4, local_devices=2)
      >>> devices[3]
      SimulatedDevice(id=3, process_index=1, platform='cpu')
    """

    id: int
    process_index: int
    platform: str = "cpu"

    @property
    def device_kind(self) -> str:
        """What JAX (0.12) reads to describe a mesh's devices abstractly."""
        return "simulated"


def simulated_devices(num_processes: int, local_devices: int) -> list[SimulatedDevice]:
    """``num_processes * local_devices`` simulated devices, numbered process by process.

    Pass them as ``devices=`` to any layout constructor to plan that topology in one process.

    Example:
      >>> devices = jaxload.simulated_devices(4, 2)
      >>> layout = jaxload.model_replicas_across_processes(2, devices=devices)
      >>> [p.shard_index for p in layout.plans(global_batch_size=16)]
      [0, 1, 0, 1]
    """
    num_processes = positive_int("num_processes", num_processes)
    local_devices = positive_int("local_devices", local_devices)
    return [
        SimulatedDevice(id=p * local_devices + d, process_index=p)
        for p in range(num_processes)
        for d in range(local_devices)
    ]


def ordered(devices: Sequence[Device] | None) -> list[Device]:
    """``devices`` (default: every device of the job) process by process, then by id."""
    found: list[Device] = list(jax.devices() if devices is None else devices)
    if not found:
        raise ValueError("devices must not be empty")
    return sorted(found, key=lambda d: (d.process_index, d.id))


def by_process(devices: list[Device]) -> list[list[Device]]:
    """Devices grouped by process; every process must have the same number of devices."""
    groups: dict[int, list[Device]] = {}
    for d in devices:
        groups.setdefault(d.process_index, []).append(d)
    counts = {p: len(g) for p, g in groups.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"every process must have the same number of devices, got {counts}")
    return [groups[p] for p in sorted(groups)]
