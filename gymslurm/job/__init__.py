"""What runs inside a Slurm (or local) job: one link of a shard's chain, the aggregation, or a watch's tick.

``link.py`` (lock → gates → account → gates → start → collect → decide → record → steps: the gates in
``gates.py``, the steps after the decision in ``after_decision.py``, the collect phase in
``collect_phase.py``, a suite's middle in ``suite_link.py``), ``aggregation.py`` (the merge,
exactly once), ``heartbeat.py`` (signals and the liveness file), ``collector_process.py`` (the
collector as a child process), ``collector_files.py`` (what a link reads of the collector's files,
through the store), ``servers.py`` (starting and stopping the job's servers) and
``server_watch.py`` (the link's end of server supervision). A watch's tick job is a command
(``commands/watch_tick.py``: it submits suite runs as ``gymslurm submit`` does). Nothing here imports
the views.
"""
