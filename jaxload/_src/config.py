"""What a user asked of a loader, validated once, before any pipeline is built."""

from __future__ import annotations

import dataclasses

from jaxload._src import whereabouts
from jaxload._src.defaults import DEFAULT_EXIT_GRACE_S, DEFAULT_TIMEOUT_S
from jaxload._src.failures import check_on_failure
from jaxload._src.layout import Layout, Plan
from jaxload._src.records import check_record
from jaxload._src.remainder import PAD, check_remainder, padded_batch_size
from jaxload._src.validate import is_nonnegative_int, is_positive_int

EVERY_PASS_START = 2**63  # checks="first": a period no pass reaches


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """The options of :func:`jaxload.from_grain` / :func:`jaxload.from_tf_data` that do not
    depend on the backend; each is documented there. A bad value raises, naming it.

    Example:
      >>> LoaderConfig(remainder="pad", checks=10).check_period
      10
      >>> LoaderConfig(prefetch=True)
      Traceback (most recent call last):
      ...
      ValueError: prefetch=True must be an int >= 0 (batches assembled ahead; 0 turns prefetching off)
    """

    remainder: str = "drop"
    checks: str | int = "first"
    prefetch: int = 2
    timeout_s: float = DEFAULT_TIMEOUT_S
    on_failure: str = "exit"
    exit_grace_s: float = DEFAULT_EXIT_GRACE_S
    name: str | None = None
    record: str | None = None
    load_once: bool = False
    batched: bool = False  # the pipeline batches itself (batched=True, a grain.DataLoader)

    def __post_init__(self) -> None:
        check_remainder(self.remainder)
        _check_period(self.checks)
        if not is_nonnegative_int(self.prefetch):
            raise ValueError(f"prefetch={self.prefetch!r} must be an int >= 0 (batches assembled "
                             "ahead; 0 turns prefetching off)")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) \
                or not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {self.timeout_s!r}")
        check_on_failure(self.on_failure, self.exit_grace_s)
        whereabouts.check_name(self.name)
        if not isinstance(self.load_once, bool):
            raise TypeError(f"load_once must be True or False, got {self.load_once!r}")
        check_record(self.record)

    def plan(self, layout: Layout, global_batch_size: int) -> Plan:
        """What this process loads: its loading group's rows of each (padded) global batch, or
        with ``load_once`` its own ``1/num_processes`` of them (:meth:`~jaxload.Layout.load_once_plan`)."""
        physical = padded_batch_size(layout, global_batch_size, self.remainder)
        if self.load_once:
            return layout.load_once_plan(physical)
        return layout.plan(physical)

    @property
    def pad(self) -> bool:
        return self.remainder == PAD

    @property
    def check_period(self) -> int:
        """Steps between automatic checks: 0 for never, a huge period for the first step only."""
        return _check_period(self.checks)


def _check_period(checks: str | int) -> int:
    if checks == "first":
        return EVERY_PASS_START
    if checks == "never":
        return 0
    if is_positive_int(checks):
        return checks
    raise ValueError(f"checks={checks!r} must be 'first', 'never' or a positive int N (every N steps)")
