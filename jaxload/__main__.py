"""``python -m jaxload``: the same as the ``jaxload`` command."""

import sys

from jaxload.cli import main

sys.exit(main())
