"""One process kills itself (SIGKILL, no cleanup) mid-epoch; the survivor must end with an error.

The victim dies 3 steps before a round of the step agreement (a pass of known length has one
every ``MAX_KNOWN_WINDOW`` steps), which the survivor then waits in: the loader's own detection
(``timeout_s=5``), well within JAX's heartbeat timeout.

Usage (under jaxload.testing.run_script): lose_a_peer.py VICTIM_PROCESS_INDEX
"""

import os
import signal
import sys
import time

import jaxload.testing

jaxload.testing.initialize()

import grain  # noqa: E402
import jax  # noqa: E402

import jaxload  # noqa: E402
from jaxload._src.protocol import MAX_KNOWN_WINDOW  # noqa: E402

victim = int(sys.argv[1])
dies_at = MAX_KNOWN_WINDOW - 3
start = time.monotonic()
loader = jaxload.from_grain(grain.MapDataset.range(10_000), jaxload.data_parallel(),
                            global_batch_size=8, timeout_s=5)
try:
    for step, _ in enumerate(loader):
        if step == dies_at and jax.process_index() == victim:
            print(f"process {victim} kills itself at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.01)
except jaxload.PeerTimeoutError as e:
    print(f"after {time.monotonic() - start:.1f} s: {type(e).__name__}: {e}", flush=True)
    sys.exit(3)
print("the epoch ended without noticing the lost process", flush=True)
