"""Prints every TCP socket this process listens on, as ``LISTEN address:port``.

Usage (under jaxload launch): listeners.py
"""

import os

import jaxload

jaxload.initialize()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

# a cross-process collective, so that gloo's sockets are open too
multihost_utils.process_allgather(np.ones(1, np.int32))
jax.block_until_ready(jax.jit(jnp.sum)(jnp.ones(4)))
inodes = set()
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if target.startswith("socket:["):
        inodes.add(target[8:-1])


def address(hex_address: str, v6: bool) -> str:
    """``host:port loopback=True|False`` of a /proc/net/tcp{,6} address."""
    import ipaddress

    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if v6:  # four little-endian 32-bit words
        ip = ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
        loopback = ip.is_loopback or bool(ip.ipv4_mapped and ip.ipv4_mapped.is_loopback)
    else:
        ip = ipaddress.IPv4Address(raw[::-1])
        loopback = ip.is_loopback
    return f"{ip}:{int(port, 16)} loopback={loopback}"


for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
    with open(table) as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN, one of this process's
                print(f"LISTEN {address(fields[1], v6)}", flush=True)
multihost_utils.sync_global_devices("listed")
