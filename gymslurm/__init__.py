"""gymslurm: crash-safe LLM evaluation rollouts on Slurm.

The package is layered so that the data flow reads top to bottom (docs/architecture.md):
settings → tasks → identity → store (the run's files) → selection/coverage (pure) →
dispatch (HTTP) → collector → aggregate/health → launcher (Slurm chains).
Importing ``gymslurm`` is cheap on purpose: heavy modules load lazily in the commands.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
