"""Processes out of step (a loader or a check on some processes only) are named within seconds
on every process, in real processes (tests/scripts/out_of_step.py), instead of waiting out
``timeout_s`` (600 s by default)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import jaxload.testing

SCRIPT = str(Path(__file__).parent / "scripts" / "out_of_step.py")
GRACE_S = 10.0  # the watchdog's default exit_grace_s
BOUND_S = 2 * 2.0 + GRACE_S + 10  # two looks (whereabouts.SUSPECT_S) + the exit + slack


@pytest.mark.parametrize("backend,n,d,case,process,named", [
    ("grain", 2, 2, "loader", 0, ["loader@out_of_step.py:56", "loader@out_of_step.py:59"]),
    ("grain", 4, 2, "loader", 2, ["loader@out_of_step.py:56", "loader@out_of_step.py:59"]),
    ("tf", 2, 2, "loader", 1, ["loader@out_of_step.py:56", "loader@out_of_step.py:59"]),
    ("grain", 2, 2, "named", 1, ["loader 'peek' pass 0", "loader 'train' pass 0"]),
    ("grain", 2, 2, "check", 0, ["check.batch 'out_of_step.py:62'"]),
    ("grain", 4, 2, "check", 3, ["check.batch 'out_of_step.py:62'"]),
])
@pytest.mark.cluster
def test_processes_out_of_step_are_named_within_seconds(backend, n, d, case, process, named):
    with pytest.raises(jaxload.testing.ProcessesFailed) as failed:
        jaxload.testing.run_script([SCRIPT, backend, case, str(process)], num_processes=n,
                                   local_devices=d, timeout_s=120, fail_fast=False)
    e = failed.value
    starts = [float(t) for log in e.logs for t in re.findall(r"START ([\d.]+)", log)]
    assert len(starts) == n, str(e)
    ends = [None if end is None else end - max(starts) for end in e.ended_at]
    assert all(c not in (None, 0) for c in e.returncodes), f"exit codes {e.returncodes}\n{e}"
    assert all(end is not None and end < BOUND_S for end in ends), f"ends {ends}\n{e}"
    for p, log in enumerate(e.logs):
        assert "out of step" in log, f"process {p}:\n{log[-3000:]}"
        for part in named:
            assert part in log, f"process {p} does not name {part!r}:\n{log[-3000:]}"
