"""The ``pe-research`` command line: ``app`` dispatches, one module per subcommand.

app      the parser, ``COMMANDS`` (subcommand -> module) and ``main``
train    ``pe-research train``: a config file (+ overrides) -> a run directory
eval     ``pe-research eval``: a run over a grid of lengths -> ``RUN_DIR/eval/<name>.*``
compare  ``pe-research compare``: runs grouped by a config key -> ``comparison.*``
analyze  ``pe-research analyze``: geometry of positions, attention decomposition and weights
data     ``pe-research data``: tasks, examples, SCAN files, frozen eval sets
"""

from pe_research.cli.app import COMMANDS, main

__all__ = ["COMMANDS", "main"]
