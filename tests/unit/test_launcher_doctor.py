"""`gymslurm doctor`'s rule table over captured `scontrol show config` / `show partition -o` text.

The captured text is the sandbox's (Slurm 22.05.8, tests/unit/recorded/); each row edits one
setting the way a site might have it and names the finding it must produce.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gymslurm.commands.doctor import Finding, blocking, check, exit_codes, refusal
from gymslurm.errors import SlurmError
from gymslurm.site.slurm import parse_config, parse_partitions

RECORDED = Path(__file__).with_name("recorded")
CONFIG_TEXT = (RECORDED / "scontrol_show_config_sandbox.txt").read_text()
PARTITION_TEXT = (RECORDED / "scontrol_show_partition_sandbox.txt").read_text()


def _config(**settings: str) -> dict[str, str]:
    text = CONFIG_TEXT
    for key, value in settings.items():
        text, n = re.subn(rf"^{key} +=.*$", f"{key} = {value}", text, flags=re.M)
        assert n == 1, key
    return parse_config(text)


def _partitions(edit: tuple[str, str] | None = None) -> dict[str, dict[str, str]]:
    text = PARTITION_TEXT if edit is None else PARTITION_TEXT.replace(*edit)
    return parse_partitions(text)


def _find(findings: list[Finding], setting: str) -> Finding:
    (found,) = [f for f in findings if f.setting == setting]
    return found


def test_the_sandbox_as_captured() -> None:
    """The sandbox has nothing blocking; linuxproc is a warning; REQUEUE on low is supported."""
    findings = check(_config(), _partitions(), shards=2)
    assert blocking(findings) == []
    assert _find(findings, "ProctrackType").level == "warning"
    assert _find(findings, "PreemptMode[low]").level == "ok"
    assert _find(findings, "AccountingStorageType").level == "info"


# (name, config edits, partition edit, setting, level)
ROWS = [
    ("RequeueExit with 75 loops a stopped link", {"RequeueExit": "75"}, None, "RequeueExit", "error"),
    ("RequeueExit with a range over 76", {"RequeueExit": "1-100"}, None, "RequeueExit", "error"),
    (
        "RequeueExitHold with 75 holds the link for ever",
        {"RequeueExitHold": "75,76"},
        None,
        "RequeueExitHold",
        "error",
    ),
    (
        "RequeueExit without 75 or 76 is fine",
        {"RequeueExit": "3,4"},
        None,
        "RequeueExit/RequeueExitHold",
        "ok",
    ),
    (
        "PreemptMode CANCEL is supported",
        {},
        ("PreemptMode=REQUEUE", "PreemptMode=CANCEL"),
        "PreemptMode[low]",
        "ok",
    ),
    (
        "PreemptMode SUSPEND freezes a link",
        {},
        ("PreemptMode=REQUEUE", "PreemptMode=SUSPEND,GANG"),
        "PreemptMode[low]",
        "warning",
    ),
    (
        "a short MinJobAge without accounting loses crash evidence",
        {"MinJobAge": "10 sec"},
        None,
        "MinJobAge",
        "warning",
    ),
    (
        "accounting gives final states for ever",
        {"AccountingStorageType": "accounting_storage/slurmdbd"},
        None,
        "AccountingStorageType",
        "ok",
    ),
    (
        "proctrack/cgroup kills every process",
        {"ProctrackType": "proctrack/cgroup"},
        None,
        "ProctrackType",
        "ok",
    ),
    (
        "a short KillWait may kill a link before its decision",
        {"KillWait": "2 sec"},
        None,
        "KillWait",
        "warning",
    ),
    ("JobRequeue=0 still requeues --requeue links", {"JobRequeue": "0"}, None, "JobRequeue", "info"),
    # slurm.lookahead 3 (the default): 2 shards hold 2 x 3 tasks (first links, spares), + 1 per
    # running link + 3
    ("MaxJobCount below 4 x shards + 3 throttles", {"MaxJobCount": "10"}, None, "MaxJobCount", "info"),
    (
        "MaxJobCount without room for one link per array blocks",
        {"MaxJobCount": "9"},
        None,
        "MaxJobCount/MaxArraySize",
        "error",
    ),
    ("MaxArraySize 0 (no arrays) blocks", {"MaxArraySize": "0"}, None, "MaxArraySize", "error"),
]


@pytest.mark.parametrize(("name", "edits", "edit", "setting", "level"), ROWS, ids=[r[0] for r in ROWS])
def test_rule_table(
    name: str, edits: dict[str, str], edit: tuple[str, str] | None, setting: str, level: str
) -> None:
    """Each row: one site setting gives one finding of the right level, with what it breaks."""
    finding = _find(check(_config(**edits), _partitions(edit), shards=2), setting)
    assert finding.level == level, finding
    assert finding.meaning
    if level in ("error", "warning"):
        assert finding.fix


def test_blocking_findings_are_the_errors() -> None:
    """submit refuses exactly the error findings (a chain would hang, loop or not be queued)."""
    findings = check(_config(RequeueExitHold="75"), _partitions())
    assert [f.setting for f in blocking(findings)] == ["RequeueExitHold"]


def test_an_unknown_partition_is_an_error_naming_the_known_ones() -> None:
    """--partition that does not exist is an error listing the partitions."""
    finding = _find(check(_config(), _partitions(), partition="gpu"), "partition")
    assert finding.level == "error" and "debug, high, low" in finding.meaning


def test_one_partition_limits_the_preemption_checks() -> None:
    """--partition P checks P's PreemptMode only."""
    findings = check(_config(), _partitions(), partition="low")
    assert [f.setting for f in findings if f.setting.startswith("PreemptMode")] == ["PreemptMode[low]"]


def test_a_short_signal_lead_is_a_warning() -> None:
    """A signal lead under 60 s may not leave the collector time to stop."""
    assert _find(check(_config(), _partitions(), signal_lead_s=30), "signal_lead_s").level == "warning"


@pytest.mark.parametrize(("text", "codes"), [("(null)", set()), ("75", {75}), ("1,75-77", {1, 75, 76, 77})])
def test_exit_code_lists(text: str, codes: set[int]) -> None:
    """RequeueExit lists and ranges are read as sets of exit codes."""
    assert exit_codes(text) == codes


def test_config_text_that_is_not_scontrol_raises() -> None:
    """Text without SLURM_VERSION is refused, quoting it."""
    with pytest.raises(SlurmError, match="scontrol show config"):
        parse_config("slurm_load_ctl_conf error: Unable to contact slurm controller")


def test_submit_refusal_names_each_blocking_setting_and_its_fix() -> None:
    """The refusal submit raises names every blocking setting, what it breaks and the fix."""
    message = refusal(check(_config(RequeueExit="75", RequeueExitHold="76"), _partitions()))
    assert message is not None and "nothing was submitted" in message
    assert "RequeueExit = 75" in message and "RequeueExitHold = 76" in message
    assert message.count("fix: remove 75 and 76") == 2


def test_no_refusal_on_the_sandbox() -> None:
    """The sandbox as captured passes submit's checks."""
    assert refusal(check(_config(), _partitions(), shards=2)) is None


def test_doctor_says_why_kill_on_invalid_dep_is_not_passed_naming_the_version_and_the_bug() -> None:
    """The finding names the cluster's Slurm version, the site's kill_invalid_depend and desispec#2658."""
    finding = _find(
        check(_config(SchedulerParameters="kill_invalid_depend"), _partitions(), shards=2),
        "--kill-on-invalid-dep",
    )
    assert finding.level == "info" and "kill_invalid_depend on" in finding.value and "Slurm " in finding.value
    assert "desispec#2658" in finding.meaning and "afterany" in finding.meaning


def test_no_script_passes_kill_on_invalid_dep() -> None:
    """The templates do not pass the flag (an afterany dependency cannot become invalid)."""
    from gymslurm.resources import templates_dir

    assert all("kill-on-invalid-dep" not in p.read_text() for p in templates_dir().glob("*.sbatch"))
