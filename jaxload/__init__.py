"""jaxload: tf.data and Grain pipelines to global jax.Array batches on multi-process JAX."""

from types import ModuleType as _ModuleType

from jaxload import check
from jaxload._src import exports, moved
from jaxload._src.adapters.grain import from_grain, grain_shard_options
from jaxload._src.adapters.tfdata import from_tf_data
from jaxload._src.agreement import PeerFailedError, PeerTimeoutError
from jaxload._src.assemble import assemble
from jaxload._src.cluster import initialize
from jaxload._src.failures import PipelineStuckError
from jaxload._src.input_context import InputContext
from jaxload._src.iterator import LoaderIterator
from jaxload._src.layout import (
    Layout,
    Plan,
    SimulatedDevice,
    data_parallel,
    model_replicas_across_processes,
    model_replicas_in_process,
    simulated_devices,
)
from jaxload._src.loader import Loader
from jaxload._src.pipelines.tf.split import ShardingWarning
from jaxload._src.remainder import REMAINDER_MODES, unpad
from jaxload._src.stats import Stats, StatsSummary
from jaxload._src.whereabouts import OutOfStepError
from jaxload._src.wire import MalformedValueError
from jaxload.check import DuplicationError, PlanMismatchError, ReplicationError

__version__ = "0.2.0"


def __getattr__(name: str) -> _ModuleType:
    """``jaxload.checkpoint`` (Orbax) is imported on first use, so ``import jaxload`` needs no
    orbax."""
    if name == "checkpoint":
        import importlib

        return importlib.import_module("jaxload.checkpoint")
    raise AttributeError(f"module 'jaxload' has no attribute {name!r}")


__all__ = (
    "DuplicationError",
    "InputContext",
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
    "ShardingWarning",
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

exports.claim(__name__, globals(), [n for n in __all__ if n != "check"])
moved.install()
