"""gymslurm's version, on the ground floor: run files record it, so the store imports it."""

__version__ = "0.1.0"
