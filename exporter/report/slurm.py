"""What Slurm says about a job (its times, user, GPUs, stored summary), and storing a summary.

Read with ``sacct`` (the accounting database, long after the job) and, where accounting is
not there, ``scontrol show job`` (slurmctld's memory: running jobs and those that ended
within ``MinJobAge``). Stored with ``sacctmgr update job ... set AdminComment=`` as Jobstats
stores it (it needs slurmdbd); the value is read back, and where this Slurm's ``sacctmgr``
stored it in lower case (22.05 does) the case-proof form is stored instead
(``exporter.report.admincomment``). Every command runs with a timeout and
``SLURM_TIME_FORMAT=%s`` (Unix seconds); none is run through a shell.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

__all__ = ["SlurmError", "SlurmJob", "job_facts", "store_admin_comment"]

#: Seconds a Slurm command may take.
TIMEOUT = 30.0
#: ``sacct`` fields read (AdminComment last: it could in principle hold a "|").
SACCT_FIELDS = ("JobIDRaw", "User", "State", "Start", "End", "NodeList", "AllocTRES",
                "Account", "AdminComment")
_GPUS = re.compile(r"(?:^|,)gres/gpu=(\d+)")

#: Runs a command: (argv) -> (exit status, stdout, stderr).
Runner = Callable[[Sequence[str]], "tuple[int, str, str]"]


class SlurmError(Exception):
    """A Slurm command failed in a way the user must know; the message is one line."""


def run(argv: Sequence[str]) -> tuple[int, str, str]:
    """Run a Slurm command (exit status 127: not installed)."""
    env = {**os.environ, "SLURM_TIME_FORMAT": "%s"}
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=TIMEOUT,
                              env=env, check=False)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: not installed"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: no answer within {TIMEOUT:g} s"
    return done.returncode, done.stdout, done.stderr


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """A job as Slurm knows it (``end`` None while it runs)."""

    job_id: str
    user: str = ""
    state: str = ""
    start: float | None = None
    end: float | None = None
    nodes: str = ""
    gpus: int | None = None
    admin_comment: str = ""
    account: str = ""  # the Slurm account the job ran under (who pays, where sites bill by it)


def _seconds(text: str) -> float | None:
    return float(text) if text.strip().isdigit() and int(text) > 0 else None


def _gpus(tres: str) -> int | None:
    found = _GPUS.search(tres)
    return int(found.group(1)) if found else None


def _from_sacct(job_id: str, out: str) -> SlurmJob | None:
    for line in out.splitlines():
        fields = line.split("|", len(SACCT_FIELDS) - 1)
        if len(fields) != len(SACCT_FIELDS) or fields[0] != job_id:
            continue
        raw, user, state, start, end, nodes, tres, account, comment = fields
        return SlurmJob(raw, user, state.split()[0] if state else "", _seconds(start),
                        _seconds(end), nodes, _gpus(tres), comment.strip(), account)
    return None


def _from_scontrol(job_id: str, out: str) -> SlurmJob | None:
    # One line of Key=Value pairs; values have no spaces except the last keys' (Command...).
    values = dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", out))
    if values.get("JobId") != job_id:
        return None
    user = values.get("UserId", "").split("(", 1)[0]
    return SlurmJob(job_id, user, values.get("JobState", ""),
                    _seconds(values.get("StartTime", "")), _seconds(values.get("EndTime", "")),
                    values.get("NodeList", ""), _gpus(values.get("AllocTRES", "")),
                    values.get("AdminComment", ""), values.get("Account", ""))


def job_facts(job_id: str, runner: Runner = run) -> SlurmJob | None:
    """The job from ``sacct``, else ``scontrol``; None when neither knows it (or Slurm's
    commands are not here)."""
    status, out, _ = runner(["sacct", "-n", "-P", "-X", "-a", "-j", job_id,
                             "-o", ",".join(SACCT_FIELDS)])
    found = _from_sacct(job_id, out) if status == 0 else None
    if found is not None and found.end is not None:
        return found
    # Not in the database, or its end not yet there (the slurmctld epilog runs as the job
    # ends): slurmctld's own record, which has it.
    status, out, _ = runner(["scontrol", "-o", "show", "job", job_id])
    live = _from_scontrol(job_id, out) if status == 0 else None
    if found is None or live is None:
        return found or live
    return replace(found, end=live.end, state=live.state or found.state)


def _stored(job_id: str, runner: Runner) -> str:
    status, out, _ = runner(["sacct", "-n", "-P", "-X", "-a", "-j", job_id, "-o",
                             "AdminComment"])
    return out.strip() if status == 0 else ""


def store_admin_comment(job_id: str, value: str, case_proof: str,
                        runner: Runner = run) -> str:
    """Store ``value`` (``JS1:...``) in the job's AdminComment in the accounting database;
    where this ``sacctmgr`` stores it in lower case, ``case_proof`` (``JS1B32:...``) instead.
    Returns the value stored.

    Raises:
        SlurmError: ``sacctmgr`` failed (no slurmdbd, not an administrator, no such job) or
            the value read back is not what was stored.
    """
    stored = _store(job_id, value, runner)
    if stored == value:
        return value
    if stored != value.lower():
        raise SlurmError(f"job {job_id}'s AdminComment reads back as {stored[:40]!r}, not what "
                         "was stored")
    stored = _store(job_id, case_proof, runner)  # this sacctmgr lowercases: base 32 survives
    if stored.upper() != case_proof.upper():
        raise SlurmError(f"job {job_id}'s AdminComment reads back as {stored[:40]!r}, not what "
                         "was stored")
    return stored


def _store(job_id: str, value: str, runner: Runner) -> str:
    """Store one value; what reads back."""
    status, out, err = runner(["sacctmgr", "-i", "update", "job", "where", f"jobid={job_id}",
                               "set", f"AdminComment={value}"])
    if status != 0 or "Modified" not in out:
        why = (err or out).strip().splitlines()
        raise SlurmError(f"sacctmgr could not store job {job_id}'s AdminComment: "
                         f"{why[-1] if why else f'exit status {status}'}")
    return _stored(job_id, runner)
