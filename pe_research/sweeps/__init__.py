"""Sweeps: grids of configs whose seeds train stacked, run locally or on SLURM, then compared.

spec       sweep files: ``get_config()`` + ``sweep()`` -> a validated plan of grid points
state      the sweep directory: manifest, per-point plans and states, derived run states
grouping   grid points that can stack (task, lengths, seed, rate, decay) into programs up to a cap
worker     one job: its grid points' unfinished members as one ensemble (several if too large)
executors  local processes (``--jobs``), SLURM job arrays or submitit's local executor
report     evaluate the finished members, compare them grouped by the swept keys
"""

from pe_research.sweeps.spec import Sweep, product

__all__ = ["Sweep", "product"]
