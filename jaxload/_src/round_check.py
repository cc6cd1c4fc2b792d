"""The first step's check (:func:`jaxload.check.plan_and_batch`) carried by a pass's first
round instead of an exchange of its own.

A pass's first round already gathers a report from every process and waits for all of them.
A process that has its first batch assembles the step before the round (nothing is padded at
a pass's first step where it has data) and sends the step's check records in its report; the
leader compares them in its decision, and every process raises the same
:class:`~jaxload.check.CheckError` or hands the step out as checked. A process that cannot
compute its records fails the pass in the checking stage, told to every process in that round.
Where any process sent no records (it has no first batch and pads), the step is checked on the
loop's side as before, in an exchange of its own. The batch checked is the one the loop
receives (a ``load_once`` reshard, which runs on the loop's side, is checked there instead).
"""

from __future__ import annotations

import dataclasses

from jaxload._src import check, wire
from jaxload._src.comparisons import ERRORS, CheckError
from jaxload._src.protocol import Decision, Report


def verdict(decision: Decision, reports: dict[int, Report]) -> Decision:
    """``decision`` with the check's outcome, where every process sent its records and the
    first step is handed out; a failed check ends the pass.

    Example:
      >>> from jaxload._src.protocol import Decision, Report
      >>> verdict(Decision(count=1), {0: Report(ready=1), 1: Report(ready=1)}).checked
      False
    """
    seen = {p: r.check for p, r in reports.items()}
    if decision.count < 1 or decision.error is not None or any(
            r is None for r in seen.values()):
        return decision
    try:
        check.verify_plan_and_batch(seen)
    except CheckError as e:
        return dataclasses.replace(decision, checked=True, more=False, template_from=None,
                                   check_error=[type(e).__name__, str(e)])
    except (KeyError, TypeError, ValueError):  # malformed records: the loop's side checks
        return decision
    return dataclasses.replace(decision, checked=True)


def raise_if_failed(decision: Decision, key: str) -> None:
    """Raises the check's error of ``decision`` (read from ``key``), if it found one."""
    if decision.check_error is None:
        return
    name, message = (decision.check_error + ["", ""])[:2]
    if name not in ERRORS:
        raise wire.MalformedValueError(f"malformed decision in {key!r} written by process 0: "
                                       f"unknown check error {name!r}")
    raise ERRORS[name](message)
