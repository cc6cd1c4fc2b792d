"""The stages of a pass, named in every failure report (``process 1 failed reading at step 3``)."""

from __future__ import annotations

import enum


class Stage(str, enum.Enum):
    """Where in a pass a failure happened. A ``str``: it is sent between processes as its value.

    Example:
      >>> Stage.RESHARDING.value, f"failed {Stage.READING}"
      ('resharding', 'failed loading')
    """

    READING = "loading"          # the pipeline's next batch (user code: the map, the file read)
    ASSEMBLING = "assembling"    # a per-process batch checked and placed on the devices
    PADDING = "padding"          # rows of a step whose data has run out
    RESHARDING = "resharding"    # load_once: rows moved to the layout's sharding, on device
    CHECKING = "checking"        # the run-time checks of jaxload.check
    HANDING_OUT = "handing out"  # anything else on the loop's side of the pass

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
