"""Run a function or a script in N local processes x D fake CPU devices, as a real JAX cluster.

Each process gets ``XLA_FLAGS=--xla_force_host_platform_device_count=D`` before JAX is imported,
gloo CPU collectives, and ``jax.distributed`` on a free 127.0.0.1 port (a single process runs
without ``jax.distributed``). Every run has a timeout; if a process fails or the timeout passes,
all processes are killed and the error shows the tail of each process's output.

Example:
  In a file (``fn`` must be a module-level function of a file each process can load again; not
  run here, where the examples run in one process and define their functions in none):

  >>> import jaxload.testing
  >>> def where_am_i():
  ...     import jax
  ...     return jax.process_index(), jax.local_device_count(), jax.device_count()
  >>> jaxload.testing.run(where_am_i, num_processes=2, local_devices=4)  # doctest: +SKIP
  [(0, 4, 8), (1, 4, 8)]

  A script needs no file of its own (``python -c``), and here no JAX either:

  >>> outputs = jaxload.testing.run_script(
  ...     ["-c", "import os; print(os.environ['JAXLOAD_PROCESS_ID'])"],
  ...     num_processes=2, local_devices=4)
  >>> [out.strip() for out in outputs]
  ['0', '1']
"""

from jaxload._src import exports
from jaxload._src.cluster import initialize
from jaxload._src.testing import (
    ProcessesFailed,
    launch,
    run,
    run_script,
)
from jaxload._src.warm_cluster import (
    Cluster,
    cluster,
)

__all__ = (
    "Cluster",
    "ProcessesFailed",
    "cluster",
    "initialize",
    "launch",
    "run",
    "run_script",
)

exports.claim(__name__, globals(), __all__)
