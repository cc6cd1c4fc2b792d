"""What the checks find: the leader's comparisons of every process's shard records and plans,
and the errors that every process raises when they disagree (:mod:`jaxload.check`)."""

from __future__ import annotations

import hashlib
from typing import Any

from jaxload._src.fingerprints import ShardRecord
from jaxload._src.whereabouts import ranges


class CheckError(ValueError):
    """A run-time check found data on the wrong devices (the base of the errors below).

    Example:
      >>> layout = jaxload.data_parallel()
      >>> same = jax.device_put(np.tile([1.0, 2.0], (8, 1)), layout.sharding)  # 8 equal rows
      >>> try:
      ...     jaxload.check.batch({"x": same})
      ... except jaxload.check.CheckError as e:
      ...     print(type(e).__name__)
      DuplicationError
    """


class ReplicationError(CheckError):
    """Devices that should hold identical rows of a global array hold different data.

    Raised by :func:`replication` and :func:`batch` on every process.

    Example:
      Device 1 holds other data than its partner in the model replica on devices 0 and 1:

      >>> layout = jaxload.model_replicas_in_process(2)       # replicas of 2 devices
      >>> rows = np.arange(8.0)
      >>> indices = layout.sharding.addressable_devices_indices_map((8,))
      >>> shards = [jax.device_put(rows[index] + (d.id == 1), d) for d, index in indices.items()]
      >>> x = jax.make_array_from_single_device_arrays((8,), layout.sharding, shards)
      >>> jaxload.check.replication({"x": x})
      Traceback (most recent call last):
      ...
      jaxload.check.ReplicationError: batch['x'] rows [0, 2) should be identical on every device
      that holds them, but 2 versions exist: devices 0 (process 0) hold version 1; devices 1 ...
    """


class DuplicationError(CheckError):
    """Devices that hold different rows of a batch hold identical data.

    Raised by :func:`distinct` and :func:`batch` on every process.

    Example:
      Every device got the same row, as when each process loads the whole, unsharded pipeline:

      >>> layout = jaxload.data_parallel()
      >>> x = jax.device_put(np.tile([1.0, 2.0], (8, 1)), layout.sharding)
      >>> jaxload.check.distinct({"x": x})
      Traceback (most recent call last):
      ...
      jaxload.check.DuplicationError: different rows of the batch hold identical data: rows [0, 1)
      on devices 0 (process 0); rows [1, 2) on devices 1 (process 0); ...
    """


class PlanMismatchError(CheckError):
    """Processes computed different layouts or global batch sizes.

    Raised by :func:`plan` on every process, naming the processes that differ from process 0
    and what each of them built.

    Example:
      It takes two processes to differ; in one process the check always passes:

      >>> jaxload.check.plan(jaxload.data_parallel(), global_batch_size=64)
      >>> issubclass(jaxload.PlanMismatchError, ValueError)
      True
    """


ERRORS: dict[str, type[CheckError]] = {
    e.__name__: e for e in (ReplicationError, DuplicationError, PlanMismatchError)}
_SHOWN = 8  # processes listed one by one in an error; the rest are counted


def _holders(devices: list[tuple[int, int]]) -> str:
    return ", ".join(f"{d} (process {p})" for d, p in devices)


def verify_replication(records: list[tuple[int, ShardRecord]]) -> None:
    """Raises :class:`ReplicationError` where devices holding the same index of a leaf
    (``(process, record)`` pairs) hold different fingerprints."""
    by_index: dict[tuple[str, int, int, str], dict[str, list[tuple[int, int]]]] = {}
    for process, (name, start, stop, index, device, fp, _) in records:
        by_index.setdefault((name, start, stop, index), {}).setdefault(fp, []).append((device, process))
    for (name, start, stop, _), versions in by_index.items():
        if len(versions) > 1:
            ordered = sorted(versions.values(), key=len)
            described = "; ".join(f"devices {_holders(h)} hold version {i + 1}"
                                  for i, h in enumerate(ordered))
            culprit = ("the devices of version 1 are the minority" if len(ordered[0]) < len(ordered[1])
                       else "no version has a majority, so any of them may be the wrong one")
            raise ReplicationError(
                f"{name} rows [{start}, {stop}) should be identical on every device that holds "
                f"them, but {len(versions)} versions exist: {described}; {culprit}. Their "
                "processes loaded other data than their replica partners (a pipeline sharded by "
                "process index instead of by loading group, or unsynchronized shuffling)."
            )


def verify_distinct(records: list[tuple[int, ShardRecord]]) -> None:
    """Raises :class:`DuplicationError` where different row blocks hold the same fingerprints
    over all leaves together (blocks of a single repeated value excepted), in at least half of
    the batch's row blocks: duplicate loading (processes that loaded the same rows) gives every
    block a twin, while a few records that are legitimately alike (a header at the start of
    every file, met by two loading groups in one step) do not raise."""
    blocks: dict[tuple[int, int, int, int], list[str]] = {}  # (process, device, start, stop)
    constant: dict[tuple[int, int, int, int], bool] = {}  # every leaf one repeated value
    for process, (name, start, stop, _, device, fp, leaf_constant) in records:
        block = (process, device, start, stop)
        blocks.setdefault(block, []).append(f"{name}={fp}")
        constant[block] = constant.get(block, True) and leaf_constant
    holders: dict[str, dict[tuple[int, int], list[tuple[int, int]]]] = {}
    for block, fps in blocks.items():
        process, device, start, stop = block
        if not constant[block]:  # all padding, say: identical blocks are legitimate
            fp = hashlib.blake2b("|".join(fps).encode(), digest_size=8).hexdigest()
            holders.setdefault(fp, {}).setdefault((start, stop), []).append((device, process))
    ranges = {rows for by_rows in holders.values() for rows in by_rows}
    twinned = [by_rows for by_rows in holders.values() if len(by_rows) > 1]
    if 2 * sum(len(by_rows) for by_rows in twinned) < len(ranges):
        return  # a few alike records, not duplicate loading
    for by_rows in twinned:
        described = "; ".join(f"rows [{a}, {b}) on devices {_holders(h)}"
                              for (a, b), h in sorted(by_rows.items()))
        raise DuplicationError(
            f"different rows of the batch hold identical data: {described}. These devices "
            "should have different per-replica batches; the processes probably loaded the "
            "same data (a pipeline not sharded by loading group, or shard=False over "
            "identical pipelines)."
        )


def verify_plan(seen: dict[int, Any]) -> None:
    """Raises :class:`PlanMismatchError` naming the processes whose plan (a dict of its mesh,
    batch axes, feature specs, global batch size and device order) differs from process 0's."""
    reference = seen[min(seen)]
    differ = {p: v for p, v in seen.items() if v != reference}
    if differ:
        shown = sorted(differ)[:_SHOWN]
        lines = [f"  process {min(seen)}: {_describe_plan(reference)}"] + [
            f"  process {p}: {_describe_plan(differ[p])}" for p in shown]
        if len(differ) > len(shown):
            lines.append(f"  ... and {len(differ) - len(shown)} more processes")
        raise PlanMismatchError(
            f"processes [{ranges(sorted(differ))}] use a different layout or global batch "
            "size than process 0; every process must build the same layout:\n" + "\n".join(lines)
        )


def _describe_plan(p: dict[str, Any]) -> str:
    specs = f", feature_specs {p['feature_specs']}" if p["feature_specs"] else ""
    return (f"mesh {p['mesh']}, batch_axes {tuple(p['batch_axes'])}{specs}, global_batch_size "
            f"{p['global_batch_size']}, device order #{p['devices']}")
