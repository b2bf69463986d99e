"""The Slurm launcher: benchmark configs become self-healing job chains, one per shard.

Pure parts: :mod:`decide` (the chain decision), :mod:`render` (sbatch scripts), the parsers of
:mod:`slurm`. I/O parts: :mod:`slurm` (the only caller of Slurm commands), :mod:`ledger` (per-shard
append-only history), :mod:`chain` (one link, inside a job), :mod:`submit`, :mod:`status`,
:mod:`local` (the same chains as local processes).
"""
