"""``set_state``'s verdict, agreed by every process: a state refused on one process is refused on
all of them, before any data is read.

Whether a state fits can differ between processes. Sharded by files, each loading group's
position is its own, so the state of process 0 continues exactly on the processes of its
group and is refused on the others: without this agreement the refusing processes would raise
while the rest started the pass and waited for them.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from jaxload._src import agreement, watchdog, whereabouts
from jaxload._src import state as states
from jaxload._src.exchange import Reports
from jaxload._src.pipelines.base import Pipeline
from jaxload._src.whereabouts import Name, ranges

_SHOWN = 300  # characters of a refusal that reach the leader (and the others' message)


@dataclasses.dataclass(frozen=True)
class _Report:
    refused: str | None = None  # this process's ValueError, or None: the state fits here


@dataclasses.dataclass(frozen=True)
class _Moved:
    moved: bool = False  # the state's plan differs from this process's loader's


def agreed_resume_point(state: Any, mine: states.State, pipeline: Pipeline, loader: str,
                        timeout_s: float) -> states.Position:
    """:func:`jaxload._src.state.resume_point` of ``state`` for the loader named ``loader``
    whose own state is ``mine`` over ``pipeline``, agreed by every process (:func:`agree`)."""
    elsewhere = _any_moved(bool(states.moved(state, mine)), whereabouts.CREATED.new(
        f"loader/{loader}/set_state/plans", f"set_state of loader {loader!r}: plans (call "
        "{ordinal})"), timeout_s)
    try:
        resume, refusal = states.resume_point(state, mine, pipeline.not_resumable,
                                              pipeline.elastic, elsewhere), None
        check = getattr(pipeline, "check_position", None)  # where a backend checks its own
        if check is not None:  # under a schedule a step takes one or more pipeline batches
            check(resume, batch_a_step="schedule" not in mine["plan"])
    except ValueError as e:  # raised on every process (a state can fit on some only)
        resume, refusal = states.START, e
    agree(refusal, whereabouts.CREATED.new(f"loader/{loader}/set_state",
                                           f"set_state of loader {loader!r} (call {{ordinal}})"),
          timeout_s)
    return resume


def _any_moved(moved: bool, name: Name, timeout_s: float) -> bool:
    """Whether the plan of the state differs from the loader's on any process: then every
    process restarts at the state's global row (a state of one process handed to all of them:
    the processes of its loading group would otherwise continue its position at its step, and
    the others restart at step 0, out of step)."""
    def decide(reports: Reports) -> tuple[str, bool]:
        return "moved" if any(r.moved for r in reports.parsed(_Moved).values()) else "", True

    return agreement.gather(name, json.dumps({"moved": moved}), decide, timeout_s) == "moved"


def agree(refusal: ValueError | None, name: Name, timeout_s: float) -> None:
    """Every process's refusal (None: the state fits) at the leader; raises on every process
    if any refused: the refusing ones their own ``refusal``, the others a ValueError naming the
    processes that refused and the first one's reason. A collective: every process calls it.

    Example:
      >>> from jaxload._src import whereabouts
      >>> agree(None, whereabouts.one_off("example.set_state"), 60)   # one process: its own
    """

    def decide(reports: Reports) -> tuple[str, bool]:
        refused = {p: r.refused for p, r in reports.parsed(_Report).items()
                   if r.refused is not None}
        if not refused:
            return "", True
        processes = sorted(refused)
        return (f"set_state was refused on process{'es' if len(processes) > 1 else ''} "
                f"[{ranges(processes)}], so no process resumes from this state (process "
                f"{processes[0]}: {refused[processes[0]]})"), True

    text = "" if refusal is None else str(refusal)
    report = json.dumps({} if refusal is None else {
        "refused": text[:_SHOWN] + ("..." if len(text) > _SHOWN else "")})
    dog = watchdog.this_process()
    dog.start()
    verdict = agreement.gather(name, report, decide, timeout_s, watch=dog)
    if refusal is not None:
        raise refusal
    if verdict:
        raise ValueError(verdict)
