"""systemd/gpu-exporter-mail-report.py: the weekly mail of the workstation install.

The real ``gpu-exporter report`` asks a real Prometheus holding six hours of the report tests'
scenario and its accounting records (tests/report/backfill.py); the mail goes to a sendmail
stand-in that keeps each message as sendmail received it (and refuses one recipient, to show a
failure is said and the rest still go out).
"""

from __future__ import annotations

import email
import email.policy
import importlib.util
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from exporter.catalogue import records
from exporter.report.main import build_parser
from tests.report import scenario
from tests.report.backfill import PROMETHEUS, PROMTOOL, Prometheus, create_blocks

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "systemd" / "gpu-exporter-mail-report.py"
HOURS = 6
LEAD = "lead@lab.example"
#: Keeps each message as received (argv in the first line), refuses mail for dave.
SENDMAIL = """import sys, pathlib
message = sys.stdin.buffer.read()
if b"dave@" in message.split(b"\\n\\n", 1)[0]:
    print("sendmail: dave@lab.example: mailbox unavailable", file=sys.stderr)
    sys.exit(75)
out = pathlib.Path(sys.argv[1])
(out / f"{len(list(out.iterdir()))}.eml").write_bytes(" ".join(sys.argv[2:]).encode() + b"\\n"
                                                      + message)
"""


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mail_report", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mail_report"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


mail_report = _load()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, float]]:
    """Six hours of two hosts and five users, with the accounting records; and their start."""
    if not (PROMETHEUS.exists() and PROMTOOL.exists()):
        pytest.skip("needs Debian's prometheus package (scripts/test installs it)")
    tmp = tmp_path_factory.mktemp("mail")
    t0 = float(int(time.time() - scenario.DAY) // 7200 * 7200)
    raw = tmp / "raw.om"
    with raw.open("w") as out:
        out.writelines(scenario.openmetrics(t0, 0, HOURS * 3600 + 1))
    prom = Prometheus(tmp)
    create_blocks([raw], prom.tsdb)
    try:
        prom.start()
        rule_file = tmp / records.RULE_FILE
        shutil.copy(ROOT / "dashboards" / "rules" / records.RULE_FILE, rule_file)
        rules = yaml.safe_load(rule_file.read_text())["groups"][0]["rules"]
        prom.evaluate_rules(rules, t0 + 30, t0 + HOURS * 3600, records.INTERVAL_SECONDS, tmp)
        prom.rule_file = rule_file
        prom.start()
        yield prom, t0
    finally:
        prom.stop()


def _messages(out: Path) -> dict[str, tuple[str, EmailMessage]]:
    """To -> (sendmail's arguments, the message)."""
    found = {}
    for path in sorted(out.iterdir()):
        argv, _, raw = path.read_bytes().partition(b"\n")
        message = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        found[str(message["To"])] = (argv.decode(), message)
    return found


def _html(message: EmailMessage) -> str:
    body = message.get_body(("html",))
    assert body is not None
    content = body.get_content()
    assert isinstance(content, str)
    return content


def test_mails_the_lab_lead_everyone_and_each_user_their_own(
        prometheus: tuple[Prometheus, float], tmp_path: Path) -> None:
    prom, t0 = prometheus
    out = tmp_path / "mail"
    out.mkdir()
    sendmail = tmp_path / "sendmail.py"
    sendmail.write_text(SENDMAIL)
    recipients = tmp_path / "recipients"
    # root (the desktop's Xorg) gets no mail, as a lab would set it.
    recipients.write_text("# user address\nalice alice.smith@lab.example\ncarol -\nroot -\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "GPU_REPORT_LAB_LEAD": LEAD,
        "GPU_REPORT_DOMAIN": "lab.example",
        "GPU_REPORT_RECIPIENTS": str(recipients),
        "GPU_REPORT_FROM": "gpu-exporter@ws1.lab.example",
        "GPU_REPORT_ARGS": f"--prometheus.url {prom.url} --start {t0:.0f} "
                           f"--end {t0 + HOURS * 3600:.0f}",
        "GPU_REPORT_EXPORTER": str(Path(sys.executable).parent / "gpu-exporter"),
        "GPU_REPORT_SENDMAIL": f"{sys.executable} {sendmail} {out} -oi -t",
    }
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True,
                            text=True, timeout=240, check=False)
    print(f"\nmail-report: 6 reports and 5 mails in {time.monotonic() - started:.1f} s")
    assert result.returncode == 1, result.stderr  # dave's mail was refused
    assert result.stderr.strip().splitlines() == [
        "gpu-exporter-mail-report: dave's report to dave@lab.example: "
        f"{sys.executable}: sendmail: dave@lab.example: mailbox unavailable"]
    assert "carol: no address" in result.stdout
    mails = _messages(out)
    assert set(mails) == {LEAD, "alice.smith@lab.example", "bob@lab.example",
                          "erin@lab.example"}
    for argv, message in mails.values():
        assert argv.endswith("-oi -t")
        assert message["From"] == "gpu-exporter@ws1.lab.example"
        (attachment,) = message.iter_attachments()
        assert attachment.get_content_type() == "text/html"
        assert attachment.get_filename().endswith(".html")
        assert attachment.get_content() == _html(message)
    _, lead = mails[LEAD]
    assert "everyone" in lead["Subject"]
    everyone = _html(lead)
    for user in ("alice", "bob", "carol", "dave", "erin"):
        assert f">{user}<" in everyone, user
    _, alice = mails["alice.smith@lab.example"]
    assert alice["Subject"].startswith("Your GPU use on ")
    own = _html(alice)
    assert ">alice<" in own
    assert not any(f">{user}<" in own for user in ("bob", "carol", "dave", "erin"))


def test_bad_settings_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for env, problem in (
        ({}, "GPU_REPORT_LAB_LEAD: set the lab lead's address"),
        ({"GPU_REPORT_LAB_LEAD": LEAD, "GPU_REPORT_ARGS": "--since 7d --format text"},
         "GPU_REPORT_ARGS: --format is set by this script"),
        ({"GPU_REPORT_LAB_LEAD": LEAD, "GPU_REPORT_RECIPIENTS": str(tmp_path / "none")},
         "does not exist"),
    ):
        result = subprocess.run([sys.executable, str(SCRIPT)], env={"PATH": "/usr/bin", **env},
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 2
        assert len(result.stderr.splitlines()) == 1
        assert problem in result.stderr


def test_who_gets_mail() -> None:
    config = mail_report.settings({"GPU_REPORT_LAB_LEAD": LEAD, "GPU_REPORT_DOMAIN": "@x.org"})
    assert mail_report.address("alice", config) == "alice@x.org"
    assert mail_report.address("1042", config) == "1042@x.org"  # a uid without a name
    for nobody in ("unknown", "", "bob smith", 'x"} or {y="'):
        assert mail_report.address(nobody, config) is None
    no_domain = mail_report.settings({"GPU_REPORT_LAB_LEAD": LEAD})
    assert mail_report.address("alice", no_domain) is None


def test_the_shipped_settings_work_as_systemd_passes_them() -> None:
    """mail-report.env as systemd's EnvironmentFile reads it (quotes removed): the script takes
    it, and gpu-exporter report takes the flags it passes."""
    environ = {}
    for line in (ROOT / "systemd" / "mail-report.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            environ[key] = value[1:-1] if value[:1] == value[-1:] == '"' else value
    config = mail_report.settings(environ)
    assert config.lab_lead == ("lab-lead@example.org",)
    assert mail_report.address("alice", config) == "alice@example.org"
    parsed = build_parser().parse_args([*config.report_args, "--format", "html"])
    assert (parsed.url, parsed.since) == ("http://127.0.0.1:9090", "7d")
