"""What each field of a loader state must hold (:mod:`jaxload._src.state`), checked before a
resume trusts it."""

from __future__ import annotations

from typing import Any

from jaxload._src.validate import is_nonnegative_int

_SCHEDULE_KEYS = ("origin_step", "steps_before")  # under a batch-size schedule


def check_fields(state: dict[str, Any]) -> None:
    """Every field a resume reads, checked before it is trusted: a ValueError naming the
    field, its value and what was expected (a state edited by hand, cut short, or of another
    program), before any batch is read.

    Example:
      >>> check_fields({"plan": "data", "step": 0, "position": None})
      Traceback (most recent call last):
      ...
      ValueError: the state's plan must be a mapping of the plan's sizes (as get_state writes it), got 'data'
    """
    plan = state.get("plan")
    if not isinstance(plan, dict):
        raise ValueError("the state's plan must be a mapping of the plan's sizes (as get_state "
                         f"writes it), got {plan!r:.80}")
    least = {"shard_count": 1, "local_batch_size": 1, "global_batch_size": 1,
             "rows_per_step": 1, "shard_index": 0, "process_index": 0}
    for key, low in least.items():
        if key not in plan and key == "rows_per_step":  # older states: global_batch_size
            continue
        if key not in plan:
            raise ValueError(f"the state's plan has no {key!r} (an int >= {low}): its fields "
                             f"are {sorted(plan)}")
        _check_int(f"plan[{key!r}]", plan[key], low)
    if plan["shard_index"] >= plan["shard_count"]:
        raise ValueError(f"the state's plan['shard_index'] must be below its shard_count "
                         f"({plan['shard_count']}), got {plan['shard_index']}")
    if "position" not in state:
        raise ValueError("the state has no position (the backend's, as get_state writes it): "
                         f"its fields are {sorted(state)}")
    for key in ("step", "origin", "rows", *_SCHEDULE_KEYS):
        if key in state or key == "step":
            _check_int(key, state.get(key), 0)
    length = state.get("length")
    if length is not None:
        _check_int("length", length, 0)
    if "rows" not in state or "schedule" in plan:
        return
    per_step = plan.get("rows_per_step", plan["global_batch_size"])
    expected = state.get("origin", 0) + state["step"] * per_step
    if state["rows"] != expected:
        raise ValueError(f"the state's rows ({state['rows']}) must be origin + step x "
                         f"rows_per_step = {state.get('origin', 0)} + {state['step']} x "
                         f"{per_step} = {expected}: a state whose fields disagree was changed "
                         "after get_state wrote it")
    if length is not None and state["rows"] >= length + per_step:
        raise ValueError(f"the state's rows ({state['rows']}) lie past the end of the pipeline "
                         f"({length} rows, {per_step} a step)")


def _check_int(field: str, value: Any, least: int) -> None:
    if not is_nonnegative_int(value) or value < least:
        raise ValueError(f"the state's {field} must be an int >= {least}, got {value!r}")
