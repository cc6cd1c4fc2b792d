"""Prints from every process, then process 1 fails with exit code 7."""

import sys

import jaxload

jaxload.initialize()

import jax  # noqa: E402

print(f"hello from {jax.process_index()} of {jax.process_count()}, "
      f"{jax.local_device_count()} local devices", flush=True)
if jax.process_index() == 1 and "--fail" in sys.argv:
    print("process 1 gives up", flush=True)
    sys.exit(7)
