"""What a person reads of a run, on the login node: ``status``, ``report.html`` and ``logs``.

Read-only: these modules query the scheduler and read the ledgers and the store, and write
nothing but the report page. Nothing that runs inside a job imports them.
"""
