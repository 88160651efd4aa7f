#!/usr/bin/python3
"""Mail the HTML ``gpu-exporter report`` to the lab lead (everyone) and to each user (their own).

Installed as /usr/local/bin/gpu-exporter-mail-report and run weekly by
gpu-exporter-report.timer (docs/workstation.md). Python's standard library only; the report
itself comes from ``gpu-exporter report``, the mail goes through the local ``sendmail`` (Postfix,
Exim, msmtp-mta and nullmailer all provide one).

Settings, from the environment (the unit reads /etc/gpu-exporter/mail-report.env):

  GPU_REPORT_LAB_LEAD    addresses that get the whole report, comma-separated (required)
  GPU_REPORT_DOMAIN      mail each user as <user>@<domain>; empty: only users in the
                         recipients file get their report
  GPU_REPORT_RECIPIENTS  file of "user address" lines (address "-": never mail this user),
                         default /etc/gpu-exporter/recipients (optional)
  GPU_REPORT_ARGS        flags for gpu-exporter report, default "--since 7d"
  GPU_REPORT_MATCH       label matchers for every report, e.g. instance="ws1:9477"
  GPU_REPORT_FROM        sender, default gpu-exporter@<this host's name>
  GPU_REPORT_EXPORTER    the gpu-exporter program, default /opt/gpu-exporter/bin/gpu-exporter
  GPU_REPORT_SENDMAIL    the mail command, default "/usr/sbin/sendmail -oi -t"

Exit status: 0 when every report was mailed, 1 when any report or mail failed (each failure is
one line on stderr; the others are still sent), 2 for bad settings.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path

#: A user label that can be put in a matcher and an address (passwd names, numeric uids).
USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
#: Users the exporter could not name: nobody to mail.
NOBODY = frozenset({"unknown", ""})


class SettingsError(Exception):
    """A setting is missing or unusable; the message names it."""


@dataclass(frozen=True)
class Settings:
    lab_lead: tuple[str, ...]
    domain: str
    recipients: dict[str, str]
    report_args: tuple[str, ...]
    match: str
    sender: str
    exporter: str
    sendmail: tuple[str, ...]


def _recipients(path: Path, required: bool) -> dict[str, str]:
    if not path.is_file():
        if required:
            raise SettingsError(f"GPU_REPORT_RECIPIENTS: {path} does not exist")
        return {}
    found: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise SettingsError(f"{path}:{number}: expected 'user address', got {line!r}")
        found[words[0]] = words[1]
    return found


def settings(environ: Mapping[str, str]) -> Settings:
    """The settings from ``environ``.

    Raises:
        SettingsError: the lab lead is missing, a flag is given where it must not be, or the
            recipients file is malformed.
    """
    lead = tuple(a.strip() for a in environ.get("GPU_REPORT_LAB_LEAD", "").split(",")
                 if a.strip())
    if not lead:
        raise SettingsError("GPU_REPORT_LAB_LEAD: set the lab lead's address")
    args = tuple(shlex.split(environ.get("GPU_REPORT_ARGS", "--since 7d")))
    reserved = [a for a in args if a.split("=")[0] in ("--format", "--output", "-o", "--match")]
    if reserved:
        raise SettingsError(f"GPU_REPORT_ARGS: {reserved[0]} is set by this script "
                            "(label matchers go into GPU_REPORT_MATCH)")
    listed = environ.get("GPU_REPORT_RECIPIENTS")
    return Settings(
        lab_lead=lead,
        domain=environ.get("GPU_REPORT_DOMAIN", "").strip().lstrip("@"),
        recipients=_recipients(Path(listed or "/etc/gpu-exporter/recipients"), bool(listed)),
        report_args=args,
        match=environ.get("GPU_REPORT_MATCH", "").strip(),
        sender=environ.get("GPU_REPORT_FROM") or f"gpu-exporter@{socket.getfqdn()}",
        exporter=environ.get("GPU_REPORT_EXPORTER", "/opt/gpu-exporter/bin/gpu-exporter"),
        sendmail=tuple(shlex.split(environ.get("GPU_REPORT_SENDMAIL",
                                               "/usr/sbin/sendmail -oi -t"))),
    )


def address(user: str, config: Settings) -> str | None:
    """Where ``user``'s own report goes, or None (no address, opted out, or not a name)."""
    if user in config.recipients:
        listed = config.recipients[user]
        return None if listed == "-" else listed
    if user in NOBODY or not USER.fullmatch(user) or not config.domain:
        return None
    return f"{user}@{config.domain}"


def report(config: Settings, output_format: str, user: str | None = None) -> str:
    """``gpu-exporter report`` in ``output_format``, of everyone or of one user.

    Raises:
        RuntimeError: the report failed (its one-line error is the message).
    """
    matchers = [m for m in (config.match, f'user="{user}"' if user else "") if m]
    command = [config.exporter, "report", *config.report_args, "--format", output_format,
               "--no-progress", *(["--match", ",".join(matchers)] if matchers else [])]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False,
                            stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit status {result.returncode}"]
        raise RuntimeError(lines[-1])
    return result.stdout


def message(config: Settings, to: Sequence[str], subject: str, html: str,
            filename: str) -> EmailMessage:
    """An HTML mail whose body is the report, with the report attached to open in a browser
    (mail clients strip parts of a page's style)."""
    mail = EmailMessage()
    mail["From"] = config.sender
    mail["To"] = ", ".join(to)
    mail["Subject"] = subject
    mail["Date"] = formatdate(localtime=True)
    mail["Message-ID"] = make_msgid(domain=config.sender.rpartition("@")[2] or None)
    mail.set_content(f"{subject}\n\nThe report is the HTML part of this mail and the attached "
                     f"{filename}.\n")
    mail.add_alternative(html, subtype="html")
    mail.add_attachment(html.encode("utf-8"), maintype="text", subtype="html",
                        filename=filename)
    return mail


def send(config: Settings, mail: EmailMessage) -> None:
    """Hand ``mail`` to sendmail.

    Raises:
        RuntimeError: sendmail failed (its last line of output is the message).
    """
    result = subprocess.run(list(config.sendmail), input=bytes(mail), capture_output=True,
                            timeout=120, check=False)
    if result.returncode != 0:
        output = (result.stderr or result.stdout).decode(errors="replace").strip()
        lines = output.splitlines() or [f"exit status {result.returncode}"]
        raise RuntimeError(f"{config.sendmail[0]}: {lines[-1]}")


def _period(doc: Mapping[str, object]) -> str:
    def day(key: str) -> str:
        value = doc.get(key)
        if not isinstance(value, (int, float)):
            return "?"
        return datetime.datetime.fromtimestamp(value).strftime("%Y-%m-%d")
    return f"{day('start')} to {day('end')}"


def run(config: Settings, dry_run: bool) -> int:
    """Mail every report; the exit status."""
    host = socket.gethostname()
    try:
        doc = json.loads(report(config, "json"))
    except (RuntimeError, ValueError) as err:
        print(f"gpu-exporter-mail-report: the report failed: {err}", file=sys.stderr)
        return 1
    period = _period(doc)
    stamp = datetime.date.today().isoformat()
    users = sorted({row["labels"].get("user", "") for row in doc.get("users", [])})
    # (recipients, subject, the user whose report it is: None for everyone's)
    jobs: list[tuple[tuple[str, ...], str, str | None]] = [
        (config.lab_lead, f"GPU use on {host}, {period}: everyone", None)]
    for user in users:
        own = address(user, config)
        if own is None:
            print(f"{user or '(no user)'}: no address (GPU_REPORT_DOMAIN or the recipients "
                  "file), not mailed")
            continue
        jobs.append(((own,), f"Your GPU use on {host}, {period}", user))
    failed = 0
    for to, subject, user in jobs:
        who = user or "everyone"
        if dry_run:
            print(f"would mail {who}'s report to {', '.join(to)}: {subject}")
            continue
        try:
            html = report(config, "html", user)
            filename = f"gpu-report-{host}-{stamp}{'-' + user if user else ''}.html"
            send(config, message(config, to, subject, html, filename))
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
            print(f"gpu-exporter-mail-report: {who}'s report to {', '.join(to)}: {err}",
                  file=sys.stderr)
            failed += 1
            continue
        print(f"mailed {who}'s report to {', '.join(to)}")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-exporter-mail-report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true",
                        help="say who would get which report (asks Prometheus for the users, "
                        "mails nothing)")
    args = parser.parse_args(argv)
    try:
        config = settings(os.environ)
    except SettingsError as err:
        print(f"gpu-exporter-mail-report: {err}", file=sys.stderr)
        return 2
    return run(config, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
