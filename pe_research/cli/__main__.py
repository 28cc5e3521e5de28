"""``python -m pe_research.cli`` runs the ``pe-research`` command line."""

import sys

from pe_research.cli.app import main

sys.exit(main())
