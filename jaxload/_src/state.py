"""Loader states: what ``Loader.get_state`` records and how ``set_state`` continues from one.

A state records two positions:

- the **backend position** (a Grain iterator state, a count of tf.data batches, ...): where this
  loading group's pipeline stands. It continues exactly on the same topology.
- the **global row position** ``rows``: how many rows of the pipeline's global (unsharded) order
  were consumed. jaxload's sharding makes step ``s`` of every layout consume exactly rows
  ``[s * G, (s + 1) * G)`` of that order (``G`` the global batch size): loading group ``k`` of
  ``K`` takes elements ``k + K * j``, ``local_batch_size = G / K`` of them per step, so the ``K``
  groups' batches of step ``s`` together are the block ``[s * G, (s + 1) * G)``. The same
  position is therefore recorded by every process, and it means the same on any topology. (A
  padded global batch, ``global_batch_size`` not a multiple of the batch shards, gives each group
  a block of each step's ``G`` rows instead; a step still consumes ``G`` rows: the state's
  ``rows_per_step``.)

``set_state`` continues a state exactly where the plan is the same (loading group, batch sizes):
with the backend position, as before. Under another plan (another process count, layout, set of
loading groups or global batch size) it restarts the pipeline at global row ``rows``: the
remaining rows ``rows, rows + 1, ...`` are sharded over the new loading groups
(``ds[rows:][k::K]`` for a Grain MapDataset, ``ds.skip(rows).shard(K, k)`` for tf.data). That
needs a pipeline the loader can slice at a row (:class:`Elastic`); the others are refused with
the reason and what to do instead.

Across the interruption, with ``remainder="pad"`` every element is delivered exactly once (the
masked-in rows), and with ``"drop"`` no element twice: only the new run's last incomplete batch is
missing, as in any epoch.

Example:
  A state taken after 2 steps of global batch 16 continues under another plan (global batch 32,
  or another process count) at row 32 of ``ds``:

  >>> import grain
  >>> ds, layout = grain.MapDataset.range(128), jaxload.data_parallel()
  >>> loader = jaxload.from_grain(ds, layout, global_batch_size=16)
  >>> batches = iter(loader)
  >>> first, second = next(batches), next(batches)
  >>> state = loader.get_state()            # the same global row on every process
  >>> state["rows"]
  32
  >>> bigger = jaxload.from_grain(ds, layout, global_batch_size=32)
  >>> bigger.set_state(state)
  >>> print(np.asarray(next(iter(bigger)))[[0, -1]])
  [32 63]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from jaxload._src.state_fields import check_fields
from jaxload._src.trees import HostBatch
from jaxload._src.validate import is_nonnegative_int

if TYPE_CHECKING:
    from jaxload._src.schedule import Schedule

State = dict[str, Any]
"""A loader state (``Loader.get_state``): JSON-serializable."""
Position = dict[str, Any]
"""Where a pass stands: ``step``, ``origin`` (the global row its pipeline started at) and the
backend ``position``."""

FORMAT = "jaxload.loader/2"
_OLD_FORMATS = ("jaxload.loader/1",)  # same-plan resume only: no global row position
START: Position = {"step": 0, "origin": 0, "position": None}
# under a batch-size schedule: the step the pipeline started at (``origin``), and the steps
# of the loader's earlier passes (the schedule's step is ``steps_before + step``)
_SCHEDULE_KEYS = ("origin_step", "steps_before")
# A loading group's pipeline: local_batches(backend position) -> (batch, position after it)...
LocalBatches = Callable[[Any], Iterable[tuple[HostBatch, Any]]]
# a state continues exactly where these are the same (the rows a step consumes, then the plan)
_PLAN_KEYS = ("rows_per_step", "shard_index", "shard_count", "local_batch_size", "global_batch_size")
_SAME_PLAN = ("Resume with the same layout, process count and global_batch_size, where the "
              "backend position continues exactly.")


@dataclasses.dataclass(frozen=True)
class Elastic:
    """Whether, and how, a loader's pipeline can start at a global row (another topology).

    Attributes:
      from_row: ``from_row(rows)`` is this loading group's ``local_batches`` for the pipeline's
        global order from row ``rows`` on, sharded and batched as for row 0; None if the
        pipeline cannot be repositioned exactly.
      why_not: why it cannot, and what to do instead (required when ``from_row`` is None).
      length: the rows of the pipeline where known (its elements; its batches' rows where the
        elements are batches, ``batched=True``), checked on resume.
      rows_per_step: rows of the global order one step consumes: the ``global_batch_size`` asked
        for, which a padded batch (``remainder="pad"``) fills up to a multiple of the batch
        shards; None: ``plan.global_batch_size``.
      fingerprint: ``fingerprint()`` identifies the pipeline's contents where that is cheap (a
        hash of a few elements of a MapDataset), checked on resume: it tells apart, e.g., two
        shuffles of one dataset. Computed on the first ``get_state``.
      refuses: ``refuses(state)`` says why a given state from another plan cannot be
        continued even so (e.g. a sampler whose order depends on the number of shards).
      carried: ``carried(position)`` is what a pass from a global row keeps of the backend
        position of a state from another plan (a reshuffling pipeline's pass and seeds, so
        that the row is one of the same order), its start position; None: it starts at None.

    Example:
      >>> elastic = Elastic(why_not="with shard=False the split over loading groups is yours")
      >>> elastic.from_row is None, elastic.length
      (True, None)
      >>> Elastic()
      Traceback (most recent call last):
      ...
      ValueError: Elastic needs from_row, or why_not saying why the pipeline cannot start at a global row
    """

    from_row: Callable[[int], LocalBatches] | None = None
    why_not: str | None = None
    length: int | None = None
    refuses: Callable[[State], str | None] | None = None
    fingerprint: Callable[[], str | None] | None = None
    rows_per_step: int | None = None
    carried: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.from_row is None and not self.why_not:
            raise ValueError("Elastic needs from_row, or why_not saying why the pipeline cannot "
                             "start at a global row")
        if self.length is not None and not is_nonnegative_int(self.length):
            raise ValueError(f"Elastic.length must be an int >= 0 or None, got {self.length!r}")

    def pipeline(self, start: Position, first: LocalBatches) -> Iterable[tuple[HostBatch, Any]]:
        """The pass starting at ``start`` (``origin``, backend ``position``); ``first`` is the
        pipeline from row 0."""
        if not start["origin"]:
            return first(start["position"])
        if self.from_row is None:
            raise ValueError(f"this pipeline cannot start at global row {start['origin']}: "
                             f"{self.why_not}")
        return self.from_row(start["origin"])(start["position"])


NOT_ELASTIC = Elastic(why_not="this loader's pipeline cannot start at a given global row")


def why_not_sliceable(shard: bool, batched: bool, whole: str) -> str | None:
    """Why a pipeline passed with ``shard=False`` or ``batched=True`` cannot start at a global
    row; ``whole`` names what to pass instead.

    Example:
      >>> why_not_sliceable(False, False, "the whole dataset")
      'with shard=False the pipeline holds the elements you split off ...'
    """
    if batched:
        return ("with batched=True the elements are whole batches of the old local_batch_size; "
                f"pass {whole} unbatched so that jaxload can start it at a row")
    if not shard:
        return ("with shard=False the pipeline holds the elements you split off for this loading "
                "group, and jaxload cannot tell which elements another split would give each new "
                f"group; pass {whole} with shard=True so that jaxload shards it")
    return None


def rows_consumed(position: Position, rows_per_step: int, schedule: Schedule | None = None
                  ) -> int:
    """Global rows consumed at ``position`` (``origin``: the row its pipeline started at, at
    step ``origin_step`` of a batch-size schedule)."""
    if schedule is not None:  # steps_before: the steps of the loader's earlier passes
        before = position.get("steps_before", 0)
        return int(position["origin"] + schedule.rows_before(before + position["step"])
                   - schedule.rows_before(before + position.get("origin_step", 0)))
    return int(position["origin"] + position["step"] * rows_per_step)


def describe(backend: str, plan: Any, remainder: str, elastic: Elastic,
             position: Position, schedule: Schedule | None = None) -> State:
    """The JSON-serializable state of a loader at ``position`` (``step``, ``origin``,
    backend ``position``); ``schedule``: its batch-size schedule, if any."""
    rows_per_step = elastic.rows_per_step or plan.global_batch_size
    return {
        "format": FORMAT,
        "backend": backend,
        "plan": {"process_index": plan.process_index, "rows_per_step": rows_per_step,
                 **{key: getattr(plan, key) for key in _PLAN_KEYS[1:]},
                 **({} if schedule is None else {"schedule": schedule.as_json()})},
        "remainder": remainder,
        "length": elastic.length,
        "fingerprint": elastic.fingerprint() if elastic.fingerprint else None,
        "rows": rows_consumed(position, rows_per_step, schedule),
        **position,
    }


def moved(state: Any, mine: State) -> list[tuple[str, Any, Any]]:
    """What differs between the plan ``state`` was taken under and this loader's ``mine``
    (``(key, in the state, here)``); empty for the same plan, or a state that is no state."""
    plan = state.get("plan") if isinstance(state, dict) else None
    if not isinstance(plan, dict):
        return []
    was = {"rows_per_step": plan.get("global_batch_size"), **plan}
    return [(key, was.get(key), mine["plan"].get(key)) for key in (*_PLAN_KEYS, "schedule")
            if was.get(key) != mine["plan"].get(key)]


def resume_point(state: Any, mine: State, not_resumable: str | None,
                 elastic: Elastic, elsewhere: bool = False) -> Position:
    """Where a loader whose own state is ``mine`` continues from ``state``: the start of its next
    pass (``step``, ``origin``, backend ``position``). Raises a ValueError naming what differs.
    ``elsewhere``: the plan differs on another process (a state of one process handed to every
    process), so this one restarts at the state's global row too, in step with the others
    (where the pipeline can; where it cannot, the others refuse the state).
    """
    check_format(state)
    if not_resumable:
        raise ValueError(f"a {mine['backend']} loader cannot resume from a state: {not_resumable}")
    check_unchanged(state, mine, ("backend", "remainder"))
    changed = moved(state, mine)
    repositioned = bool(changed) or elsewhere and "rows" in state and (
        elastic.from_row is not None and not (elastic.refuses and elastic.refuses(state)))
    start = _repositioned(state, changed, elastic) if repositioned else _exact(state, elastic)
    if "schedule" in mine["plan"] and repositioned:  # the schedule goes on at the state's step
        start = {**start, "step": state["step"], "origin_step": state["step"],
                 "steps_before": state.get("steps_before", 0)}
    check_unchanged(state, mine, ("length", "fingerprint"))
    return start


def _exact(state: State, elastic: Elastic) -> Position:
    """The same plan: the backend position continues (in a pipeline started at ``origin``)."""
    origin = state.get("origin", 0)
    if origin and elastic.from_row is None:
        raise ValueError(f"the state continues a pipeline started at global row {origin}, which "
                         f"this loader cannot start at: {elastic.why_not}")
    return {"step": state["step"], "origin": origin, "position": state["position"],
            **{key: state[key] for key in _SCHEDULE_KEYS if key in state}}


def _repositioned(state: State, changed: list[tuple[str, Any, Any]],
                  elastic: Elastic) -> Position:
    """Another plan: the pipeline restarts at the state's global row, where it can."""
    other = "the state was taken under another plan: " + "; ".join(
        f"{key}={was} in the state, {key}={now} in this loader's plan" for key, was, now in changed)
    why_not = elastic.why_not if elastic.from_row is None else (
        elastic.refuses and elastic.refuses(state))
    if why_not:
        raise ValueError(f"{other}. Continuing on another topology restarts the pipeline at the "
                         f"state's global row, which this loader cannot do: {why_not}. "
                         f"{_SAME_PLAN}")
    if "rows" not in state:
        raise ValueError(f"{other}, and the state ({state['format']}) has no global row position "
                         f"to continue from on another topology. {_SAME_PLAN}")
    kept = elastic.carried(state["position"]) if elastic.carried is not None else None
    return {"step": 0, "origin": state["rows"], "position": kept}


_FINGERPRINT = (" (the fingerprint covers a tf.data pipeline's ops, their constants such as "
                "shuffle seeds and buffer sizes, and the arrays under it; a Grain MapDataset's "
                "first, middle and last elements): a changed seed or size is the usual cause. "
                "Resume the pipeline the state was taken with, or start without set_state")


def check_format(state: Any) -> None:
    if not isinstance(state, dict) or state.get("format") not in (FORMAT, *_OLD_FORMATS):
        raise ValueError(f"not a jaxload loader state (format {FORMAT!r}): {state!r:.200}")
    check_fields(state)


_SPLIT = ("; the tf.data pipeline is split another way here (by files or by elements: with another "
          "number of loading groups, file sharding can fall back to elements, as a "
          "ShardingWarning says). Resume on the topology the state was taken on, start the pass "
          "afresh (no set_state), or build the loaders with shard='elements', which continues "
          "at any global row")


def check_unchanged(state: State, mine: State, keys: tuple[str, ...]) -> None:
    """What no resume can change: the backend, the remainder mode, the pipeline's length and
    fingerprint (where known on both sides: not for tf.data of a generator, say)."""
    for key in keys:
        was, now = state.get(key), mine[key]
        if key in ("length", "fingerprint") and (was is None or now is None):
            continue
        if was != now:
            split = key == "backend" and all(str(b).startswith("tf.data") for b in (was, now))
            raise ValueError(f"the state was taken with {key}={was!r}, this loader has "
                             f"{key}={now!r}; a state continues only the same pipeline, "
                             "backend and remainder mode" + (
                                 _FINGERPRINT if key == "fingerprint" else _SPLIT if split else ""))
