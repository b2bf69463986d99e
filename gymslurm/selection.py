"""Selection (``latest_allocated``), the failure budget, and which rollouts are pending. Pure.

The store reads a run's files into :class:`SavedOutcome` summaries grouped per rollout; this module
decides, for each logical rollout, its disposition and whether another attempt may run. Rules (spec
000, README "Readings" 1, 5, 7):

- The newest reserved execution decides: if it has an outcome, that outcome is selected; if it has
  none, the rollout is ``missing`` (reserved, no outcome) and may restart without spending budget.
  A rollout with no reservation is ``not_started``. Older outcomes never replace the newest.
- Only recorded, non-terminal failures whose delivery is ``delivered`` or ``possibly_delivered`` and
  whose sidecar line is at or after the resubmit offset count against ``max_rollout_attempts``;
  ``kill_shaped``, admission-stage and ``not_sent`` failures do not. A masked result whose kind is
  evaluation-side and kept no answer (``retry_masked``) counts one failed attempt (main-file line at
  or after the results offset). ``retry_terminal_timeouts`` makes terminal timeouts eligible and counted.
- Terminal failures and omissions are final regardless of budget.
"""

# Implementation lands with the run-store work (issue 2); the types below are the shared contract.
