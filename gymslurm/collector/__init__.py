"""The collector: one collection of rollouts, crash-safe and resumable (``gymslurm collect``).

``collect.py`` runs it (prepare, dispatch, end); ``prepare.py`` decides what a resume reuses and what
it sends again; ``routing.py`` picks each row's Environment Server; ``watch.py`` supervises the servers
during a collection; ``live.py`` and ``view.py`` are what it shows while it runs; ``end.py`` settles the
run and picks its exit code; ``seal.py`` answers a finished run's resume. The run's files are the
store's (``gymslurm/store/``); this package never reads or writes them itself.
"""
