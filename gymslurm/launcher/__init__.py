"""The launcher's model of a run: what a benchmark (or suite) config says, the run directory and its
files, each chain's append-only ledger and its decision table, what the chain's links held and cost,
notifications, and where a run's servers go.

Pure parts: :mod:`decide` (the chain decision), :mod:`links` (a chain's links as facts),
:mod:`suite_rules`. The roles around it are folders of the package: ``gymslurm/commands/`` (what a
person types on the login node), ``gymslurm/job/`` (what runs inside a job), ``gymslurm/site/``
(talking to the scheduler: Slurm or the local backend, placement, arrays, scripts), and
``launcher/views/`` (what a person reads: status, report, logs).
"""
