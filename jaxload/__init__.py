"""jaxload: tf.data and Grain pipelines to global jax.Array batches on multi-process JAX."""

from jaxload import check
from jaxload.adapters.grain import from_grain, grain_shard_options
from jaxload.adapters.tfdata import from_tf_data
from jaxload.agreement import PeerFailedError, PeerTimeoutError
from jaxload.assemble import assemble
from jaxload.check import DuplicationError, PlanMismatchError, ReplicationError
from jaxload.cluster import initialize
from jaxload.layouts import (
    Layout,
    Plan,
    SimulatedDevice,
    data_parallel,
    model_replicas_across_processes,
    model_replicas_in_process,
    simulated_devices,
)
from jaxload.loader import Loader, LoaderIterator
from jaxload.remainder import REMAINDER_MODES, unpad
from jaxload.stats import Stats, StatsSummary
from jaxload.watchdog import PipelineStuckError
from jaxload.whereabouts import OutOfStepError
from jaxload.wire import MalformedValueError

__version__ = "0.1.0"


def __getattr__(name: str):
    """``jaxload.checkpoint`` (Orbax) is imported on first use, so ``import jaxload`` needs no
    orbax."""
    if name == "checkpoint":
        import importlib

        return importlib.import_module("jaxload.checkpoint")
    raise AttributeError(f"module 'jaxload' has no attribute {name!r}")


__all__ = (
    "DuplicationError",
    "Layout",
    "Loader",
    "LoaderIterator",
    "MalformedValueError",
    "OutOfStepError",
    "PeerFailedError",
    "PeerTimeoutError",
    "PipelineStuckError",
    "Plan",
    "PlanMismatchError",
    "REMAINDER_MODES",
    "ReplicationError",
    "SimulatedDevice",
    "Stats",
    "StatsSummary",
    "assemble",
    "check",
    "data_parallel",
    "from_grain",
    "from_tf_data",
    "grain_shard_options",
    "initialize",
    "model_replicas_across_processes",
    "model_replicas_in_process",
    "simulated_devices",
    "unpad",
)
