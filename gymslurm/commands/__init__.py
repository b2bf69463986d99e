"""The subcommands that are not big enough for a package of their own (``collect``, ...).

Each module exposes ``main(argv: list[str]) -> int``; ``gymslurm/cli.py`` imports it only when run.
"""
