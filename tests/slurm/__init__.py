"""Tests against the real one-node Slurm sandbox (a package so ``from .helpers import ...`` works)."""
