"""``python -m attnforge``: the command line (attnforge.cli)."""

import sys

from .cli import main

sys.exit(main())
