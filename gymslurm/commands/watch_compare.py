"""A checkpoint's suite run compared with the previous checkpoint's and the best one's, gated, notified.

Called by a watch tick once the checkpoint's suite run ended (commands/watch_tick.py). The figures
are ``gymslurm compare``'s (comparison.py, over each benchmark's merged output), the decision
``gymslurm gate``'s (gate.py) when the watch has a ``--gate`` policy; a ``block`` is notified to the
suite's ``notify:`` receivers as the ``watch_blocked`` event (docs/notifications.md). The result,
a small summary, is what the ledger's ``compared`` record keeps (``score`` picks the best run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gymslurm.errors import GymslurmError
from gymslurm.store.watch_ledger import WatchSettings
from gymslurm.watch_rules import CheckpointState, WatchState, references


def compare_checkpoint(
    settings: WatchSettings, checkpoint: CheckpointState, state: WatchState
) -> dict[str, Any]:
    """The ``compared`` record's result for ``checkpoint`` (its score, and each reference's outcome)."""
    from gymslurm.store.suite_metrics import read_suite_metrics

    assert checkpoint.run is not None
    run = Path(checkpoint.run)
    try:
        metrics = read_suite_metrics(run)
    except GymslurmError as error:
        return {"score": None, "summary": f"no suite metrics: {error}"}
    score = metrics.weighted_mean if metrics is not None else None
    result: dict[str, Any] = {"score": score}
    previous, best = references(state)
    parts = [f"score {score:.4f}" if score is not None else "no score"]
    for label, reference in (("previous", previous), ("best", best)):
        if reference is None or (label == "best" and reference == previous):
            continue
        outcome = _against(settings, Path(reference), run, checkpoint, label)
        result[label] = outcome
        parts.append(f"vs {label}: {outcome.get('gate') or outcome.get('change') or outcome.get('error')}")
    result["summary"] = "; ".join(parts)
    return result


def _against(
    settings: WatchSettings, baseline: Path, candidate: Path, checkpoint: CheckpointState, label: str
) -> dict[str, Any]:
    """Compare ``candidate`` with ``baseline``; gate it; notify a block. Never raises a user error."""
    from gymslurm.commands.compare import read_side
    from gymslurm.comparison import Options, compare_runs

    try:
        document = compare_runs(
            read_side(str(baseline), baseline.parent, "reward"),
            read_side(str(candidate), candidate.parent, "reward"),
            Options(),
            (baseline.name, candidate.name),
        )
    except GymslurmError as error:
        return {"run": str(baseline), "error": str(error)}
    outcome: dict[str, Any] = {
        "run": str(baseline),
        "change": ", ".join(f"{b.benchmark} {b.change}" for b in document.benchmarks),
        "delta": {b.benchmark: b.delta for b in document.benchmarks},
    }
    if settings.gate_policy is not None:
        from gymslurm.gate import apply_policy, parse_policy

        policy = parse_policy(Path(settings.gate_policy).read_text(), settings.gate_policy)
        decision = apply_policy(document, policy)
        outcome["gate"] = decision.decision
        if decision.decision == "block":
            _notify_block(candidate, checkpoint, label, baseline, decision.model_dump(mode="json"))
    return outcome


def _notify_block(
    candidate: Path, checkpoint: CheckpointState, label: str, baseline: Path, gate: Any
) -> None:
    """``watch_blocked`` to the suite run's receivers (at most once per checkpoint and reference)."""
    from gymslurm.launcher.notify import Notifier, safely
    from gymslurm.launcher.rundir import RunDir

    run = RunDir(candidate)
    targets = run.load_settings().notify
    if not targets:
        return
    notifier = Notifier(run, targets, run.read_info().benchmark)
    key = f"watch_blocked:{checkpoint.digest}:{label}"
    facts = {"checkpoint": checkpoint.checkpoint, "against": label, "baseline": str(baseline), "gate": gate}
    safely(lambda: notifier.emit("watch_blocked", key, **facts))
    safely(lambda: notifier.deliver(30.0))
