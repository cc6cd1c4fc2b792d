"""A failure as every process learns it: the record, the alarm that carries it to every other
process (:func:`announce`), and the end of a process that must not go on (:func:`end_process`).

The alarms are read by each process's watchdog (:mod:`jaxload._src.watchdog`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
import traceback
from typing import NoReturn

from jaxload._src.peers import failure_key
from jaxload._src.transport import Transport

ON_FAILURE_MODES = ("exit", "raise")
EXIT_CODE = 1
_LAST_WAIT_S = 5.0  # process 0 waits exit_grace_s + this for the others to end before it ends
# and then this long: a process that said it ends is gone before the coordination service
# (whose end its own JAX client would report after its last line, a crash stack)
_AFTER_OTHERS_S = 1.0
_STACK_LINES = 40


class PipelineStuckError(TimeoutError):
    """This process's pipeline produced no batch within its time limit; the message holds the
    stack of the thread it is stuck in.

    The limit is the loader's ``timeout_s`` per batch (the first batch of a pass: 3 x
    ``timeout_s``). The other processes raise :class:`~jaxload.PeerFailedError` naming it.

    Example:
      >>> import grain
      >>> loader = jaxload.from_grain(grain.MapDataset.range(64), jaxload.data_parallel(),
      ...                             global_batch_size=16, timeout_s=60)
      >>> try:
      ...     steps = sum(1 for batch in loader)
      ... except jaxload.PipelineStuckError as e:    # no batch within 60 s: e has the stack
      ...     print(e)
      >>> steps
      4
    """


@dataclasses.dataclass(frozen=True)
class Failure:
    """A failure as every process learns it.

    Attributes:
      process: the process that failed.
      stage: what it was doing (``"loading"``, ``"assembling"``, ``"resharding"``, ...).
      step: the step of the pass it was at.
      error: ``"Type: message"`` of its exception.
      exchange: the pass (its exchange's key prefix) the failure belongs to.
      stuck: the pipeline produced nothing in time (``error`` holds the stack).
    """

    process: int
    stage: str
    step: int | None
    error: str
    exchange: str = ""
    stuck: bool = False

    @property
    def text(self) -> str:
        """``process 1 failed while loading step 60: ValueError: corrupt record 60``."""
        at = "" if self.step is None else f" step {self.step}"
        return f"process {self.process} failed while {self.stage}{at}: {self.error}"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, key: str) -> Failure:
        """Parses an alarm; a malformed one names the key and is itself a failure."""
        try:
            fields = json.loads(text)
            return cls(process=int(fields["process"]), stage=str(fields["stage"]),
                       step=None if fields.get("step") is None else int(fields["step"]),
                       error=str(fields["error"]), exchange=str(fields.get("exchange", "")),
                       stuck=bool(fields.get("stuck", False)))
        except (ValueError, KeyError, TypeError) as e:
            return cls(process=-1, stage="writing an alarm", step=None,
                       error=f"malformed value in {key!r} ({type(e).__name__}: {e}): {text[:200]!r}")


def stuck_pipeline(process: int, exchange: str, step: int, limit_s: float,
                   thread: threading.Thread) -> Failure:
    """The failure of a pipeline that produced no batch in ``limit_s`` seconds, with the stack of
    the ``thread`` that waits for it."""
    return Failure(process, "loading", step,
                   f"PipelineStuckError: its pipeline is stuck: no batch after {limit_s:g} s "
                   f"(timeout_s). Stack of thread {thread.name!r}:\n{_stack(thread)}",
                   exchange, stuck=True)


def check_on_failure(on_failure: str, exit_grace_s: float) -> tuple[str, float]:
    """Validates the ``on_failure`` and ``exit_grace_s`` loader options."""
    if on_failure not in ON_FAILURE_MODES:
        raise ValueError(f"on_failure={on_failure!r} must be 'exit' (raise, then end the process "
                         "if it is still running exit_grace_s later) or 'raise' (raise only)")
    if (isinstance(exit_grace_s, bool) or not isinstance(exit_grace_s, (int, float))
            or not exit_grace_s >= 0):
        raise ValueError(f"exit_grace_s={exit_grace_s!r} must be a number of seconds >= 0")
    return on_failure, float(exit_grace_s)


def alarm_key(process: int) -> str:
    """The key ``process``'s watchdog waits on."""
    return f"jaxload/alarm/{process}"


def announce(t: Transport, failure: Failure, claim: bool = True) -> bool:
    """Claims the failure key of ``failure``'s pass (written only if absent: the first failure
    wins) and writes the failure into every other process's alarm key; returns whether it was
    the first failure of its pass. ``claim=False``: the pass's exchange has ended (and its keys
    are deleted), so no key of it is written: only the alarms."""
    try:
        if claim and failure.exchange and not t.set_once(failure_key(failure.exchange),
                                                        failure.text):
            return False
        text = failure.to_json()
        for p in range(t.process_count):
            if p != t.process_index:
                t.set(alarm_key(p), text)
    except Exception:  # noqa: BLE001 - the process's own exception is what it raises
        return False
    return True


def end_process(t: Transport | None, message: str, own_error: BaseException | None,
                grace_s: float) -> NoReturn:
    """Prints ``message`` (and this process's own exception) and ends the process.

    Process 0 hosts the coordination service, so it ends last: it waits (at most
    ``exit_grace_s`` + :data:`_LAST_WAIT_S`) until every other process has ended, so that
    none is cut off from the service before it could say why it ends."""
    try:
        if own_error is not None:  # the loop never got to raise it
            traceback.print_exception(own_error, file=sys.stderr)
        print(message, file=sys.stderr, flush=True)
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - ending matters more than printing
        pass
    if t is not None and t.process_count > 1:
        try:
            if t.process_index != 0:
                if t.increment("jaxload/alarm/ended") >= t.process_count - 1:
                    t.set("jaxload/alarm/all_ended", "")
            else:
                t.get("jaxload/alarm/all_ended", grace_s + _LAST_WAIT_S)
                time.sleep(_AFTER_OTHERS_S)
        except Exception:  # noqa: BLE001 - bounded: a killed process never ends here
            pass
    os._exit(EXIT_CODE)


def add_note(error: BaseException, text: str) -> None:
    """Adds ``text`` to ``error``'s traceback (PEP 678, Python 3.11+), keeping its type."""
    if hasattr(error, "add_note") and text not in getattr(error, "__notes__", ()):
        error.add_note(text)


def _stack(thread: threading.Thread) -> str:
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "  (the thread has ended)"
    lines = "".join(traceback.format_stack(frame)).rstrip().splitlines()
    return "\n".join(lines[-_STACK_LINES:])
