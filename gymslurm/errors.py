"""The exception tree. Every error a user can cause says what is wrong, where to look and what to do.

::

    GymslurmError                 base; the CLI prints its message without a traceback (ExitCode.REFUSED, 2)
    ├── ConfigError               bad settings or input, found before anything is written
    │   ├── InvalidRolloutIdError an explicit _ng_rollout_id breaks the rules, or two collide
    │   ├── IdentityMismatchError a resume whose experiment identity differs (names the dotted keys)
    │   └── EnvironmentUnreachableError  the server holding the run's configuration cannot be reached
    │                                    (exit 1: infrastructure, a later job may succeed)
    ├── StoreError                the run's saved files cannot be trusted as they are
    │   ├── CorruptRecordError    a malformed complete JSONL line, a conflicting or foreign record
    │   ├── ManifestError         corrupt, unsupported, foreign or missing manifest / companions
    │   ├── InconsistentHistoryError  an interrupted fresh replacement; refused even when unsafe
    │   ├── StaleFileError        a file was replaced or shrank between indexing and reading it
    │   └── DiskFullError         a run file could not be written: no space or quota left (names the
    │                             file; exit 1: nothing saved is lost, free space and resume)
    ├── RunLockedError            another collector holds the run lock (names its pid, host, job)
    ├── LockUnsupportedError      the filesystem cannot provide flock across writer nodes
    ├── ProtocolError             an Environment Server reply breaks the protocol and routing is off
    ├── MetricsUnavailableError   the server's /aggregate_metrics is unusable (aggregation warns, goes on)
    ├── SlurmError                a Slurm command failed (command, exit code, stdout, stderr)
    ├── ServerStartError          an Environment Server a job started did not become healthy (exit 1)
    ├── SupervisionError          a link's supervision event could not be read (version mismatch?)
    ├── IncompleteRunError        (also a RuntimeError, 001) saved partial results are valid but the run
    │                             has unfinished work; its status is 75, 1 or 76 (require_complete)
    └── EpisodeFailedError        (also a RuntimeError) run_examples, no sidecar routing: an attempt failed

Foreign exceptions (OSError from the filesystem, httpx errors, subprocess failures) are translated
once, at the module that touches the outside world; nothing above it knows which library was used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gymslurm.exitcodes import ExitCode

if TYPE_CHECKING:
    from gymslurm.records import RolloutFailureRecord


class GymslurmError(Exception):
    """Base of every error gymslurm raises on purpose; its message is meant for the user."""

    exit_code: int = ExitCode.REFUSED


class ConfigError(GymslurmError):
    """The configuration or the input is wrong; nothing has been written yet."""


class InvalidRolloutIdError(ConfigError):
    """An explicit rollout id is malformed, uses the reserved ``-a<N>`` suffix, or collides."""


class IdentityMismatchError(ConfigError):
    """The saved run measured something else: its semantic settings differ from this configuration."""

    def __init__(self, message: str, differing_keys: list[str] | None = None) -> None:
        super().__init__(message)
        self.differing_keys = list(differing_keys or [])


class EnvironmentUnreachableError(ConfigError):
    """The Environment Server could not be reached to read its configuration: retryable (exit 1).

    Unlike a server that answers without a usable configuration (exit 2, a retry cannot help), a
    connection failure is infrastructure: a Slurm chain may retry the job later.
    """

    exit_code = ExitCode.RETRY


class StoreError(GymslurmError):
    """The run's saved files are not in a state that can be read or extended safely."""


class CorruptRecordError(StoreError):
    """A complete JSONL record is malformed, conflicts with another one, or belongs to another run."""


class ManifestError(StoreError):
    """The manifest or a required companion is corrupt, unsupported, foreign or missing."""


class InconsistentHistoryError(StoreError):
    """Old metadata sits beside partly replaced files: a fresh replacement was interrupted."""


class StaleFileError(StoreError):
    """A file changed identity (replaced) or shrank between indexing and reading."""


class DiskFullError(StoreError):
    """The filesystem holding the run has no space (or quota) left for a write; the file is named.

    Retryable (exit 1): every outcome saved before it is intact, and a resume after freeing space
    goes on. The collector stops saving at the first failed append, so this is the first failure.
    """

    exit_code = ExitCode.RETRY


class RunLockedError(GymslurmError):
    """Another live collector owns this output path."""

    exit_code = ExitCode.RETRY


class LockUnsupportedError(GymslurmError):
    """The filesystem cannot give an exclusive lock across every node that may write the run."""


class ProtocolError(GymslurmError):
    """An Environment Server reply broke the protocol while failure routing was off."""

    exit_code = ExitCode.RETRY


class MetricsUnavailableError(GymslurmError):
    """The Environment Server's ``/aggregate_metrics`` was unusable; aggregation keeps its own metrics."""


class SlurmError(GymslurmError):
    """A Slurm command failed; the message quotes the command, its exit code and its output."""

    exit_code = ExitCode.RETRY


class ServerStartError(GymslurmError):
    """A configured Environment Server did not become healthy in time (infrastructure: retryable).

    ``deterministic``: a stack the job cannot hold (known before anything starts): the chain stops at
    once. ``signature``: it *exited* during start-up, with this first error line; retryable (Ray's
    "current node timed out during startup" under load passes later) unless the link before failed
    the same way (``servers.start_failure_exit``), so a missing command costs two links, not the budget.
    """

    exit_code = ExitCode.RETRY

    def __init__(self, message: str, *, deterministic: bool = False, signature: str | None = None) -> None:
        super().__init__(message)
        self.deterministic = deterministic
        self.signature = signature


class SupervisionError(GymslurmError):
    """A supervision event could not be read (a gymslurm link and collector of different versions?)."""


class IncompleteRunError(GymslurmError, RuntimeError):
    """Saved partial results are valid, but the evaluation still has unfinished work (001).

    Raised by :func:`gymslurm.collect` and :func:`gymslurm.recovery.check_completion` under
    ``require_complete``; ``status`` (and ``exit_code``) is the exit code the CLI returns for it: 75
    resume and continue, 1 retry without progress, 76 stop (only terminal failures or spent budgets).
    """

    exit_code: int = ExitCode.CONTINUE

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"exit {status}: {reason}")
        self.status = self.exit_code = status
        self.reason = reason


class EpisodeFailedError(GymslurmError, RuntimeError):
    """``run_examples`` without sidecar routing: an episode attempt failed; ``record`` says how.

    NeMo Gym's ``run_examples`` raises when a ``/run`` fails; this carries the collector's
    :class:`~gymslurm.records.RolloutFailureRecord` (``record``) instead of an HTTP library's error.
    """

    exit_code: int = ExitCode.RETRY

    def __init__(self, record: RolloutFailureRecord) -> None:
        failure = record.failure
        kind = failure.failure_kind or record.routing_class
        terminal = "terminal" if failure.terminal else "non-terminal"
        super().__init__(
            f"episode {record.episode_id.capture_key} failed ({kind}, {terminal}): {failure.failure_reason}"
        )
        self.record = record
