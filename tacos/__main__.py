"""``python -m tacos`` runs the ``tacosc`` command line."""

import sys

from tacos.cli import main

sys.exit(main())
