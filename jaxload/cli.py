"""The ``jaxload`` command: ``jaxload plan`` (pictures of a plan) and ``jaxload launch``.

Examples:
  jaxload plan --processes 4 --local-devices 2 --layout replicas-across-processes \\
      --model-size 2 --global-batch-size 16 --svg plan.svg
  jaxload plan --processes 2 --local-devices 4 --mesh-shape 4,2 --mesh-axes data,model \\
      --batch-axes data --global-batch-size 32
  jaxload plan --processes 2 --local-devices 4 --mesh-shape 4,2 --mesh-axes data,seq \\
      --batch-axes data --feature-spec tokens=data,seq --global-batch-size 8 --svg cp.svg
  jaxload launch -n 2 --local-devices 4 -- python examples/quick_reference.py
"""

from jaxload._src import exports
from jaxload._src.cli import (
    main,
    parser,
)

__all__ = (
    "main",
    "parser",
)

exports.claim(__name__, globals(), __all__)
