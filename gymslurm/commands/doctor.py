"""``gymslurm doctor``: the site settings that decide whether job chains work, each with what it
breaks and the fix.

Two layers, as everywhere in the launcher: :func:`check` is a pure rule table over the parsed
text of ``scontrol show config`` and ``scontrol show partition -o`` (tested on captured text),
and :func:`run_doctor` gathers that text through :class:`gymslurm.site.slurm.SlurmClient`,
optionally runs a tiny probe job (:mod:`gymslurm.commands.probe`), and prints the findings.
``submit`` applies the same table (:func:`blocking`) and refuses a cluster on which a chain would
hang or loop, before anything is written.

Levels: ``error`` (a chain hangs, loops or cannot be submitted: ``submit`` refuses), ``warning``
(a chain works but something is lost or at risk), ``ok`` (checked, supported) and ``info`` (what
status can and cannot show here).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from gymslurm.commands.probe import probe_findings
from gymslurm.errors import ConfigError, SlurmError
from gymslurm.launcher.settings import BenchmarkSettings, SlurmSettings
from gymslurm.site.arrays import plan_arrays
from gymslurm.site.findings import Finding, Level
from gymslurm.site.placement import blocks_for
from gymslurm.site.slurm import SlurmClient, parse_config, parse_partitions, site_limits
from gymslurm.site.watch_site import watch_rules

CHAIN_EXIT_CODES = (75, 76)  # a link's job exits 75 (STOP_WALLTIME) or 76 (STOP_FAILED)
MIN_KILL_WAIT_S = 10
MIN_SIGNAL_LEAD_S = 60
SHORT_MIN_JOB_AGE_S = 60


def exit_codes(text: str) -> set[int]:
    """The exit codes of a ``RequeueExit``-style list (``75,76``, ``1-10``; ``(null)`` is empty)."""
    codes: set[int] = set()
    for part in text.replace(" ", "").split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (high.isdigit() or not high):
            codes.update(range(int(low), int(high or low) + 1))
    return codes


def _seconds(text: str) -> int | None:
    word = text.split(maxsplit=1)[0] if text.strip() else ""
    return int(word) if word.isdigit() else None


def _requeue_rules(config: Mapping[str, str]) -> list[Finding]:
    found = []
    loop = exit_codes(config.get("RequeueExit", ""))
    bad = sorted(loop & set(CHAIN_EXIT_CODES))
    if bad:
        found.append(
            Finding(
                "error",
                "RequeueExit",
                config["RequeueExit"],
                f"a link whose job exits {bad} (75: max_walltime stop, 76: terminal failures) is "
                "requeued and rerun by Slurm: an empty rerun after the chain stopped, and Slurm shows "
                "COMPLETED while gymslurm shows EXHAUSTED or FAILED",
                "remove 75 and 76 from RequeueExit in slurm.conf, then 'scontrol reconfigure'",
            )
        )
    hold = exit_codes(config.get("RequeueExitHold", ""))
    held = sorted(hold & set(CHAIN_EXIT_CODES))
    if held:
        found.append(
            Finding(
                "error",
                "RequeueExitHold",
                config["RequeueExitHold"],
                f"a link whose job exits {held} is requeued held (SPECIAL_EXIT, JobHeldUser) for ever: the "
                "aggregation waiting on it pends for ever and 'submit --wait' never returns",
                "remove 75 and 76 from RequeueExitHold in slurm.conf, then 'scontrol reconfigure'",
            )
        )
    if not bad and not held:
        found.append(
            Finding(
                "ok",
                "RequeueExit/RequeueExitHold",
                f"{config.get('RequeueExit', '(null)')} / {config.get('RequeueExitHold', '(null)')}",
                "neither contains 75 or 76: a stopped link is not rerun or held by Slurm",
            )
        )
    return found


def _preempt_rules(config: Mapping[str, str], partitions: Mapping[str, Mapping[str, str]]) -> list[Finding]:
    preempt_type = config.get("PreemptType", "preempt/none")
    if preempt_type == "preempt/none":
        return [Finding("info", "PreemptType", preempt_type, "no preemption on this cluster")]
    found = []
    for name, fields in partitions.items():
        mode = fields.get("PreemptMode", config.get("PreemptMode", "OFF")).upper()
        setting, value = f"PreemptMode[{name}]", f"{mode} (GraceTime={fields.get('GraceTime', '0')})"
        if mode.startswith("REQUEUE"):
            found.append(
                Finding(
                    "ok",
                    setting,
                    value,
                    "supported: a preempted link gets SIGTERM, writes CONTINUE, and Slurm reruns it "
                    "under the same id; its queued successor stays pending",
                )
            )
        elif mode.startswith("CANCEL"):
            found.append(
                Finding(
                    "ok",
                    setting,
                    value,
                    "supported: a preempted link gets SIGTERM, writes CONTINUE and ends CANCELLED; its "
                    "queued successor carries on",
                )
            )
        elif mode.startswith(("SUSPEND", "GANG")):
            found.append(
                Finding(
                    "warning",
                    setting,
                    value,
                    "a preempted link is suspended: Slurm keeps counting its time limit while the "
                    "collector is frozen, and the chain sees nothing",
                    "use PreemptMode=REQUEUE or CANCEL for partitions that run chains",
                )
            )
        else:
            found.append(Finding("info", setting, value, "jobs of this partition are not preempted"))
    return found


def _accounting_rules(config: Mapping[str, str]) -> list[Finding]:
    accounting = config.get("AccountingStorageType", "accounting_storage/none")
    age = _seconds(config.get("MinJobAge", "300"))
    found = []
    if accounting.endswith("/none"):
        found.append(
            Finding(
                "info",
                "AccountingStorageType",
                accounting,
                "no accounting: status and budgets come from the ledgers alone; a job's final state and "
                f"exit code are visible to squeue/scontrol only for MinJobAge ({age} s) after it ends",
            )
        )
        if age is not None and age < SHORT_MIN_JOB_AGE_S:
            found.append(
                Finding(
                    "warning",
                    "MinJobAge",
                    str(age),
                    "without accounting, a link that crashed may be forgotten by Slurm before its successor "
                    "accounts for it: the crash is then judged from its start record alone (an unknown end "
                    "within a minute with nothing saved is a crash) and status shows 'gone from squeue'",
                    f"MinJobAge >= {SHORT_MIN_JOB_AGE_S} (default 300), or enable accounting (slurmdbd)",
                )
            )
    else:
        found.append(
            Finding(
                "ok",
                "AccountingStorageType",
                accounting,
                "sacct gives every link's final state, exit code and elapsed time for ever",
            )
        )
    return found


def _dependency_rules(config: Mapping[str, str]) -> list[Finding]:
    """``--kill-on-invalid-dep``: why gymslurm does not pass it, on this cluster's Slurm version."""
    version = config.get("SLURM_VERSION", "?")
    kills = "kill_invalid_depend" in config.get("SchedulerParameters", "") + config.get(
        "DependencyParameters", ""
    )
    return [
        Finding(
            "info",
            "--kill-on-invalid-dep",
            f"not passed (Slurm {version}; site kill_invalid_depend {'on' if kills else 'off'})",
            "every chain dependency is afterany, which cannot become invalid, so the flag buys nothing; "
            "NERSC asked users to stop using it (March 2026) after a Slurm bug left runaway jobs "
            "(desihub/desispec#2658); no fixed version is public as of Slurm 25.11.4",
        )
    ]


def _process_rules(config: Mapping[str, str], signal_lead_s: int) -> list[Finding]:
    found = []
    proctrack = config.get("ProctrackType", "")
    if proctrack.endswith("linuxproc") or proctrack.endswith("pgid"):
        found.append(
            Finding(
                "warning",
                "ProctrackType",
                proctrack,
                "Slurm kills only processes it can trace to the job: a process that escapes a link (an "
                "Environment Server whose chain step was SIGKILLed) keeps running after the job",
                "proctrack/cgroup kills everything a job started",
            )
        )
    else:
        found.append(Finding("ok", "ProctrackType", proctrack, "every process of a job ends with it"))
    kill_wait = _seconds(config.get("KillWait", "30"))
    if kill_wait is not None and kill_wait < MIN_KILL_WAIT_S:
        found.append(
            Finding(
                "warning",
                "KillWait",
                f"{kill_wait} s",
                "after SIGTERM (scancel, requeue, preemption, the time limit) Slurm sends SIGKILL this soon: "
                "a link may be killed before its collector saved coverage and the link wrote its decision",
                f"KillWait >= {MIN_KILL_WAIT_S} s",
            )
        )
    else:
        found.append(
            Finding(
                "ok",
                "KillWait",
                f"{kill_wait} s",
                "a link has this long after SIGTERM to stop its collector and write its decision",
            )
        )
    if signal_lead_s < MIN_SIGNAL_LEAD_S:
        found.append(
            Finding(
                "warning",
                "signal_lead_s",
                f"{signal_lead_s} s",
                "slurmctld checks time limits about every 30 s, so the USR1 warning can come up to 30 s late "
                "relative to the limit's kill: the collector may get too little time to stop",
                f"slurm.signal_lead_s >= {MIN_SIGNAL_LEAD_S}",
            )
        )
    requeue = config.get("JobRequeue", "1")
    found.append(
        Finding(
            "ok" if requeue == "1" else "info",
            "JobRequeue",
            requeue,
            "links are submitted with --requeue, so a preempted or requeued link reruns under the same id "
            "whatever the default",
        )
    )
    return found


DEFAULT_LOOKAHEAD: int = SlurmSettings.model_fields["lookahead"].default


def _size_rules(config: Mapping[str, str], shards: int | None, lookahead: int) -> list[Finding]:
    limits = site_limits(config)
    found = []
    if shards is not None:
        try:
            plan = plan_arrays(shards, limits, None, lookahead=lookahead)
        except ConfigError as error:
            found.append(Finding("error", "MaxJobCount/MaxArraySize", str(limits), str(error), "see above"))
        else:
            arrays = len(plan.parts)
            found.append(
                Finding(
                    "ok" if plan.note is None else "info",
                    "MaxJobCount",
                    str(limits["MaxJobCount"]),
                    f"{shards} shards are {arrays} job array(s); the run holds at most {plan.footprint} job "
                    f"records (each shard's first link and its {lookahead - 1} spare(s) until it starts, "
                    f"each running link and the {lookahead} queued behind it, the aggregation's {lookahead}: "
                    "slurm.lookahead)"
                    + (f"; {plan.note}" if plan.note else "")
                    + "; other users' jobs count too",
                )
            )
    found.append(
        Finding(
            "info" if limits["MaxArraySize"] >= 1 else "error",
            "MaxArraySize",
            str(limits["MaxArraySize"]),
            "every link is an array task; submit splits the shards over one job array per "
            f"{limits['MaxArraySize']} shards (one sbatch each)",
            "" if limits["MaxArraySize"] >= 1 else "ask the site for MaxArraySize >= 1",
        )
    )
    found.append(
        Finding(
            "info",
            "MaxSubmitJobs",
            "per association/QOS",
            "a per-user limit set in the accounting database (sacctmgr show assoc), where every array "
            "task counts; submit reads it when the cluster keeps accounting and refuses a run of more "
            "shards + running successors than it allows",
        )
    )
    return found


def _partition_rules(partitions: Mapping[str, Mapping[str, str]], partition: str | None) -> list[Finding]:
    if partition is None:
        return []
    if partition not in partitions:
        known = ", ".join(sorted(partitions)) or "none"
        return [
            Finding(
                "error",
                "partition",
                partition,
                f"no such partition (known: {known})",
                "set slurm.partition to one of them",
            )
        ]
    state = partitions[partition].get("State", "UP")
    level: Level = "ok" if state == "UP" else "warning"
    return [Finding(level, f"State[{partition}]", state, "jobs of this partition start when State=UP")]


def check(
    config: Mapping[str, str],
    partitions: Mapping[str, Mapping[str, str]],
    *,
    partition: str | None = None,
    shards: int | None = None,
    signal_lead_s: int = 90,
    lookahead: int = DEFAULT_LOOKAHEAD,
) -> list[Finding]:
    """Every finding for this cluster (pure). ``partition`` limits the per-partition checks to one;
    ``lookahead`` is ``slurm.lookahead`` (the queue footprint of ``shards``)."""
    chosen = partitions
    if partition is not None and partition in partitions:
        chosen = {partition: partitions[partition]}
    return [
        *_partition_rules(partitions, partition),
        *_requeue_rules(config),
        *_preempt_rules(config, chosen),
        *_accounting_rules(config),
        *_dependency_rules(config),
        *_process_rules(config, signal_lead_s),
        *_size_rules(config, shards, lookahead),
        *watch_rules(config),
    ]


def blocking(findings: list[Finding]) -> list[Finding]:
    """The findings that make ``submit`` refuse: a chain would hang, loop, or could not be queued."""
    return [finding for finding in findings if finding.level == "error"]


def refusal(findings: list[Finding]) -> str | None:
    """Why ``submit`` refuses this cluster (every blocking finding with its fix), or None."""
    errors = blocking(findings)
    if not errors:
        return None
    lines = [f"{f.setting} = {f.value}: {f.meaning}; fix: {f.fix}" for f in errors]
    return (
        "this cluster's settings would make job chains hang or loop, so nothing was submitted:\n  "
        + "\n  ".join(lines)
        + "\n'gymslurm doctor' shows every setting chains rely on"
    )


@dataclass(frozen=True)
class Site:
    """What ``submit`` learns of the cluster before writing anything."""

    refusal: str | None  # why submit refuses (blocking findings), else None
    accounting: bool | None  # Slurm keeps accounting (sacct); None: the cluster could not be asked
    limits: dict[str, int] = field(default_factory=dict)  # MaxArraySize, MaxJobCount[, MaxSubmitJobs]


def read_site(settings: BenchmarkSettings, client: SlurmClient | None = None) -> Site:
    """One ``scontrol show config`` (plus ``show partition`` when a partition is named, and ``sacctmgr``
    for the user's limits when accounting exists); a cluster that cannot be asked passes with a warning."""
    client = client or SlurmClient(cluster=settings.slurm.cluster)
    slurm = settings.slurm
    try:
        config = parse_config(client.run(["scontrol", "show", "config"]).stdout)
        partitions = (
            parse_partitions(client.run(["scontrol", "show", "partition", "-o"]).stdout)
            if slurm.partition
            else {}
        )
    except SlurmError as error:
        print(f"gymslurm submit: warning: could not check the site settings: {error}", file=sys.stderr)
        return Site(None, None, {})
    findings = check(config, partitions, partition=slurm.partition, signal_lead_s=slurm.signal_lead_s)
    accounting = not config.get("AccountingStorageType", "accounting_storage/none").endswith("/none")
    limits = site_limits(config)
    if accounting:
        user = os.environ.get("USER") or os.environ.get("LOGNAME") or ""
        limits |= client.submit_limits(user) if user else {}
    return Site(refusal(findings), accounting, limits)


def read_sites(settings: BenchmarkSettings) -> Site:
    """:func:`read_site` of every cluster the benchmark names (``slurm.clusters``; else its one cluster):
    a refusal names its cluster; the limits are the smallest of any cluster (the plan must fit each);
    accounting is True or False when every cluster agrees, else None (each cluster is asked)."""
    clusters = settings.slurm.planned_clusters
    if clusters == [settings.slurm.cluster]:
        return read_site(settings)
    sites = {name: read_site(settings, SlurmClient(cluster=name)) for name in clusters}
    refusals = [f"cluster {name}: {site.refusal}" for name, site in sites.items() if site.refusal]
    limits: dict[str, int] = {}
    for site in sites.values():
        for key, value in site.limits.items():
            limits[key] = min(value, limits.get(key, value))
    known = {site.accounting for site in sites.values()}
    return Site("\n".join(refusals) or None, known.pop() if len(known) == 1 else None, limits)


def cluster_text(client: SlurmClient) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """``scontrol show config`` and ``scontrol show partition -o``, parsed (two queries)."""
    config = parse_config(client.run(["scontrol", "show", "config"]).stdout)
    partitions = parse_partitions(client.run(["scontrol", "show", "partition", "-o"]).stdout)
    return config, partitions


def format_findings(findings: list[Finding]) -> str:
    """The findings as text, one block each."""
    lines = []
    for finding in findings:
        lines.append(f"[{finding.level.upper():7}] {finding.setting} = {finding.value}")
        lines.append(f"          {finding.meaning}")
        if finding.fix:
            lines.append(f"          fix: {finding.fix}")
    return "\n".join(lines)


def run_doctor(
    partition: str | None,
    shards: int | None,
    as_json: bool,
    probe_root: str | None,
    python: str,
    *,
    cluster: str | None = None,
    lookahead: int = DEFAULT_LOOKAHEAD,
) -> int:
    """``gymslurm doctor``: print every finding (of ``cluster``, else the default); exit 1 on an error."""
    client = SlurmClient(cluster=cluster)
    config, partitions = cluster_text(client)
    findings = check(config, partitions, partition=partition, shards=shards, lookahead=lookahead)
    if probe_root is not None:
        findings += probe_findings(client, os.path.abspath(probe_root), partition, python)
    if as_json:
        print(json.dumps(_cluster_report(config, findings), indent=2))
    else:
        print(_cluster_header(config))
        print(format_findings(findings))
    errors = blocking(findings)
    if errors and not as_json:
        print(f"{len(errors)} setting(s) would make chains hang or loop: submit refuses", file=sys.stderr)
    return 1 if errors else 0


def _cluster_report(config: Mapping[str, str], findings: list[Finding], **more: object) -> dict[str, object]:
    return {
        "slurm_version": config.get("SLURM_VERSION", "?"),
        "cluster": config.get("ClusterName", "?"),
        **more,
        "findings": [asdict(f) for f in findings],
    }


def _cluster_header(config: Mapping[str, str]) -> str:
    return f"Slurm {config.get('SLURM_VERSION', '?')}, cluster {config.get('ClusterName', '?')}"


def plan_shards(settings: BenchmarkSettings) -> dict[str | None, int]:
    """How many shards of the benchmark each of its clusters runs (placement.py's rule; pure)."""
    clusters = settings.slurm.clusters
    if clusters is None:
        return {settings.slurm.cluster: settings.shards}
    counts: dict[str, int] = {}
    for block in blocks_for(settings.shards, clusters):
        counts[block.cluster] = counts.get(block.cluster, 0) + block.count
    return {name: counts.get(name, 0) for name in clusters}


def run_plan_doctor(
    settings: BenchmarkSettings, as_json: bool, probe_root: str | None, python: str | None = None
) -> int:
    """``gymslurm doctor --benchmark B``: every cluster the benchmark names (``slurm.clusters``, else its
    one cluster) checked with the benchmark's partition, signal lead and that cluster's share of the
    shards; a cluster that cannot be asked is an error. Exit 1 when any cluster has one."""
    reports, failing = [], []
    for name, shards in plan_shards(settings).items():
        client = SlurmClient(cluster=name)
        try:
            config, partitions = cluster_text(client)
        except SlurmError as error:
            config = {"ClusterName": name or "(default)"}
            findings = [
                Finding(
                    "error",
                    "cluster",
                    name or "(default)",
                    f"cannot be asked: {error}",
                    "check slurm.clusters and `sacctmgr list cluster`",
                )
            ]
        else:
            slurm = settings.slurm
            findings = check(
                config,
                partitions,
                partition=slurm.partition,
                shards=shards,
                signal_lead_s=slurm.signal_lead_s,
                lookahead=slurm.lookahead,
            )
            if probe_root is not None:
                findings += probe_findings(
                    client, os.path.abspath(probe_root), slurm.partition, python or slurm.interpreter
                )
        reports.append(_cluster_report(config, findings, shards=shards))
        if blocking(findings):
            failing.append(str(config.get("ClusterName", name)))
        if not as_json:
            print(f"== {_cluster_header(config)}: {shards} shard(s) of {settings.name}")
            print(format_findings(findings))
    if as_json:
        print(json.dumps({"benchmark": settings.name, "clusters": reports}, indent=2))
    elif failing:
        print(
            f"cluster(s) {', '.join(failing)} would make chains hang or loop: submit refuses", file=sys.stderr
        )
    return 1 if failing else 0


def main(argv: list[str]) -> int:
    """``gymslurm doctor``: parse its arguments and run it."""
    parser = argparse.ArgumentParser(
        prog="gymslurm doctor",
        description="Check the Slurm settings job chains rely on: what each breaks, and the fix.",
    )
    parser.add_argument("--partition", help="check this partition only (and that it exists)")
    parser.add_argument("--shards", type=int, help="check queue limits against this many shards")
    parser.add_argument(
        "--lookahead", type=int, default=2, help="slurm.lookahead of the run (jobs queued behind each job)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--probe",
        metavar="RUN_ROOT",
        default=None,
        help="also run a tiny job: Python and gymslurm on the compute node, flock on RUN_ROOT, clock",
    )
    parser.add_argument("--python", default="python", help="the Python the probe job runs (slurm.python)")
    parser.add_argument("--cluster", help="check this Slurm cluster (as -M; slurm.cluster), not the default")
    parser.add_argument(
        "--benchmark",
        metavar="BENCH",
        help="check every cluster this benchmark names (slurm.clusters, else slurm.cluster) with its "
        "partition and each cluster's share of its shards",
    )
    parser.add_argument("overrides", nargs="*", help="with --benchmark: Hydra overrides")
    args = parser.parse_intermixed_args(argv)
    from gymslurm.commands.doctor import run_doctor, run_plan_doctor

    if args.benchmark is not None:
        from gymslurm.launcher.settings import load_benchmark

        if args.cluster or args.partition or args.shards is not None:
            raise ConfigError(
                "--benchmark takes its clusters, partition and shards from the benchmark: "
                "give overrides (slurm.partition=P) instead of --cluster/--partition/--shards"
            )
        settings, _ = load_benchmark(args.benchmark, args.overrides)
        python = args.python if args.python != "python" else None
        return run_plan_doctor(settings, args.json, args.probe, python)
    if args.overrides:
        raise ConfigError(f"overrides {args.overrides} need --benchmark")
    return run_doctor(
        args.partition,
        args.shards,
        args.json,
        args.probe,
        args.python,
        cluster=args.cluster,
        lookahead=args.lookahead,
    )
