"""One process kills itself (SIGKILL, no cleanup) mid-epoch; the survivor must end with an error.

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

victim = int(sys.argv[1])
start = time.monotonic()
loader = jaxload.from_grain(grain.MapDataset.range(10_000), jaxload.data_parallel(),
                            global_batch_size=8, timeout_s=5)
try:
    for step, _ in enumerate(loader):
        if step == 3 and jax.process_index() == victim:
            print(f"process {victim} kills itself at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.01)
except jaxload.PeerTimeoutError as e:
    print(f"after {time.monotonic() - start:.1f} s: {type(e).__name__}: {e}", flush=True)
    sys.exit(3)
print("the epoch ended without noticing the lost process", flush=True)
