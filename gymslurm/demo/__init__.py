"""The built-in demo Environment Server: exact-answer arithmetic with a deterministic fake policy.

It lets a newcomer run a whole evaluation with no model and no GPU, and it is the real server the
end-to-end tests and benchmarks run against. Modules, from the wire inwards:

- ``server``   the ``gymslurm demo-server`` command (flags, dataset writer, signals)
- ``http``     a small asyncio HTTP/1.1 server (keep-alive, Content-Length bodies): the only I/O
- ``app``      configuration and routing: request bytes in, reply bytes and actions out
- ``protocol`` hand-written request validation (NeMo Gym's RunRequest rules, FastAPI-style 422s)
- ``faults``   fault selection (per task or by rates) and the reply each fault produces
- ``arith``    the benchmark: dataset, policy, exact-match verifier, aggregate metrics
- ``messages`` the small value types the layers share

Everything but ``http`` and ``server`` is pure. Docs: docs/demo-server.md.
"""
