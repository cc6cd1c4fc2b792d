"""The implementation of :mod:`jaxload.cli` (its public names and documentation are there)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where used, as the commands need them
    from jax.sharding import PartitionSpec

    from jaxload._src.layout import Layout

LAYOUTS = ("data-parallel", "replicas-in-process", "replicas-across-processes")
# `jaxload --help`: the first line of jaxload.cli's docstring (this module's is about the code)
DESCRIPTION = "The ``jaxload`` command: ``jaxload plan`` (pictures of a plan) and ``jaxload launch``."


def _plan_layout(args: argparse.Namespace) -> Layout:
    import jax

    from jaxload._src import layout, topology

    devices = topology.simulated_devices(args.processes, args.local_devices)
    if args.mesh_shape:
        shape = tuple(int(n) for n in args.mesh_shape.split(","))
        axes = tuple(args.mesh_axes.split(",")) if args.mesh_axes else None
        if axes is None or len(axes) != len(shape):
            raise ValueError(f"--mesh-axes {args.mesh_axes!r} must name each of the "
                             f"{len(shape)} dims of --mesh-shape {args.mesh_shape}")
        if np.prod(shape) != len(devices):
            raise ValueError(f"--mesh-shape {args.mesh_shape} has {np.prod(shape)} devices, the "
                             f"topology {args.processes}x{args.local_devices} has {len(devices)}")
        mesh = jax.sharding.Mesh(np.array(devices).reshape(shape), axes)
        batch_axes = tuple(args.batch_axes.split(",")) if args.batch_axes else ()
        specs = dict(_feature_spec(text) for text in args.feature_spec or ())
        return layout.Layout(mesh, batch_axes, specs or None)
    if args.feature_spec:
        raise ValueError("--feature-spec needs --mesh-shape, --mesh-axes and --batch-axes")
    if args.layout == "data-parallel":
        return layout.data_parallel(devices=devices)
    if args.layout == "replicas-in-process":
        return layout.model_replicas_in_process(args.model_size, devices=devices)
    return layout.model_replicas_across_processes(args.model_size, devices=devices)


def _feature_spec(text: str) -> tuple[str, PartitionSpec]:
    """``tokens=data,seq`` -> ``("tokens", P("data", "seq"))``; ``None`` or ``-`` for a replicated
    dim, ``a+b`` for a dim over two axes."""
    from jax.sharding import PartitionSpec

    name, sep, entries = text.partition("=")
    if not sep or not name or not entries:
        raise ValueError(f"--feature-spec {text!r} must look like NAME=AXES,AXES,... e.g. "
                         "tokens=data,seq")
    parsed = [None if e in ("None", "-", "") else tuple(e.split("+")) if "+" in e else e
              for e in entries.split(",")]
    return name, PartitionSpec(*parsed)


def _batch_size(text: str) -> int | list[tuple[int, int]]:
    """``--global-batch-size``: ``64``, or a schedule ``0:64,1000:128`` (first step: size)."""
    try:
        if ":" not in text:
            return int(text)
        return [(int(step), int(size)) for step, size in
                (pair.split(":") for pair in text.split(","))]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size (64) or a schedule of first_step:size pairs "
            "(0:64,1000:128)") from None


def _plan(args: argparse.Namespace) -> int:
    from jaxload._src import explain

    plan = _plan_layout(args).plan(args.global_batch_size)
    print(explain.text(plan, max_processes=args.max_processes), end="")
    if args.files is not None:
        print(f"input: {explain.files_text(plan, args.files)}")
    if args.svg:
        Path(args.svg).write_text(explain.svg(plan, max_processes=args.max_processes))
        print(f"wrote {args.svg}")
    return 0


def _launch(args: argparse.Namespace) -> int:
    from jaxload._src import testing

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise ValueError("jaxload launch needs a command after --, e.g. -- python train.py")
    if command[0] in ("python", "python3"):  # the interpreter jaxload runs in, with its packages
        command = [sys.executable, *command[1:]]
    return testing.launch(command, num_processes=args.num_processes,
                          local_devices=args.local_devices, timeout_s=args.timeout)


def parser() -> argparse.ArgumentParser:
    """The ``jaxload`` command's arguments: the commands ``plan`` and ``launch`` and their options.

    Example:
      >>> from jaxload import cli
      >>> argv = ["launch", "-n", "2", "--local-devices", "4", "--", "python", "train.py"]
      >>> args = cli.parser().parse_args(argv)
      >>> args.num_processes, args.local_devices, args.timeout, args.command
      (2, 4, 3600, ['--', 'python', 'train.py'])
    """
    top = argparse.ArgumentParser(prog="jaxload", description=DESCRIPTION)
    commands = top.add_subparsers(dest="cmd", required=True)

    plan = commands.add_parser("plan", help="show which process loads which rows, on a "
                               "simulated topology (no process is started)")
    plan.add_argument("--processes", type=int, required=True)
    plan.add_argument("--local-devices", type=int, required=True)
    plan.add_argument("--layout", choices=LAYOUTS, default="data-parallel")
    plan.add_argument("--model-size", type=int, default=1)
    plan.add_argument("--mesh-shape", help="instead of --layout: e.g. 4,2")
    plan.add_argument("--mesh-axes", help="names of the mesh dims, e.g. data,model")
    plan.add_argument("--batch-axes", help="mesh axes the batch is sharded over, e.g. data")
    plan.add_argument("--feature-spec", action="append", metavar="NAME=AXES,...",
                      help="with --mesh-shape: shard a feature beyond its rows, e.g. "
                      "tokens=data,seq (repeatable; None for a replicated dim)")
    plan.add_argument("--global-batch-size", type=_batch_size, required=True,
                      metavar="SIZE|STEP:SIZE,...",
                      help="rows per step, or a batch-size schedule, e.g. 0:64,1000:128")
    plan.add_argument("--max-processes", type=int, default=16,
                      help="processes shown in the device table and the SVG")
    plan.add_argument("--svg", help="also draw the plan to this SVG file")
    plan.add_argument("--files", type=int, metavar="N",
                      help="a tf.data pipeline that reads N files: what each loading group reads")
    plan.set_defaults(run=_plan)

    launch = commands.add_parser("launch", help="run a command in N local processes with fake "
                                 "CPU devices, as a JAX cluster")
    launch.add_argument("-n", "--num-processes", type=int, required=True,
                        help="processes to start, each a JAX process of the cluster")
    launch.add_argument("--local-devices", type=int, default=1,
                        help="fake CPU devices each process has (default 1)")
    launch.add_argument("--timeout", type=float, default=3600,
                        help="seconds before every process is stopped (default 3600)")
    launch.add_argument("command", nargs=argparse.REMAINDER,
                        help="after --: the command each process runs, e.g. python train.py, "
                             "which calls jaxload.initialize() without coordinates")
    launch.set_defaults(run=_launch)
    return top


def main(argv: list[str] | None = None) -> int:
    """Runs the ``jaxload`` command with ``argv`` (default: ``sys.argv[1:]``) and returns its exit
    code; a bad value prints ``jaxload <command>: <why>`` to stderr and returns 2.

    Example:
      >>> from jaxload import cli
      >>> code = cli.main(["plan", "--processes", "4", "--local-devices", "2",
      ...                  "--layout", "replicas-across-processes", "--model-size", "2",
      ...                  "--global-batch-size", "16"])
      4 processes x 2 devices, mesh replica=4 x model=2, batch over ('replica',)
      global batch 16 rows = 4 per-replica batches of 4; 2 loading groups of 8 rows each
      ...
      >>> code
      0
    """
    args = parser().parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except ValueError as e:
        print(f"jaxload {args.cmd}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
