"""The right person gets the right message, and nobody else: end to end, with real parts.

Two simulated exporters (``shared-workstation``: alice's forgotten notebook, bob's busy
training job; ``gpu-failure``: a lost GPU and ECC errors), sped up; a real Prometheus with the
shipped alert rules, generated with short ``for`` durations (the only test-only change; the rules
are otherwise the shipped ones); a real Alertmanager with the configuration
``python -m dashboards.alertmanager`` writes for a lab's contacts file (short grouping timings),
mailing a local SMTP sink and posting the operator's chat messages to a local webhook receiver.

- alice gets exactly one e-mail, naming her process's pid, memory and the command that ends it;
  bob (busy) and every other user get none;
- the operator's chat and mail get the gpu-failure scenario's operator alerts, and no owner
  alert;
- the lab lead is told about alice only once her alert has fired for the escalation time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from dashboards import alerts, escalation, rules
from exporter.catalogue import thresholds
from tests.dashboards.live import PROMETHEUS, Stack, wait_until
from tests.dashboards.notify import (
    Alertmanager,
    Sinks,
    alertmanager_running,
    amtool,
    lab_contacts,
    require_alertmanager,
    sinks,
    write_config,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not PROMETHEUS.exists(), reason="needs Debian's prometheus package"),
]

#: Test-only durations (seconds, as Prometheus durations): idle for 8 s instead of an hour,
#: escalated 15 s after firing instead of a day; GPU loss and failing collections alike.
DURATIONS = {"IDLE_FOR": "8s", "OWNER_ESCALATE_AFTER": "15s", "GPU_DOWN_FOR": "4s",
             "COLLECTION_FAILING_FOR": "4s"}
ESCALATE_AFTER_S = 15
TIMINGS = {
    "owner": {"group_wait": "3s", "group_interval": "5s", "repeat_interval": "1h"},
    "lead": {"group_wait": "3s", "group_interval": "5s", "repeat_interval": "1h"},
    "operator": {"group_wait": "2s", "group_interval": "5s", "repeat_interval": "1h"},
}
#: gpu-failure: ECC errors at 10 s, GPU 3 lost at 15 s (after Prometheus first scrapes it).
SPEEDS = {"shared-workstation": 4.0, "gpu-failure": 2.0}
ALICE, BOB, LEAD, OPERATOR = ("alice@lab.example", "bob@lab.example", "lab-lead@lab.example",
                              "gpu-admins@lab.example")
OWNER_ALERTS = {a.alert for a in alerts.all_alerts() if a.audience == "owner"}


@dataclass
class Run:
    """What the stack delivered, once the lead's escalation came in."""

    sinks: Sinks
    manager: Alertmanager


def _rules(tmp: Path) -> str:
    """The shipped alert rules with the test durations."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in DURATIONS.items():
            patch.setattr(thresholds, name, value)
        text = rules.render(alerts.groups(), "alerts.py")
    path = tmp / "alerts.yaml"
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    require_alertmanager()
    tmp = tmp_path_factory.mktemp("notify")
    with sinks() as sink:
        config = write_config(tmp / "am", lab_contacts(sink, TIMINGS))
        checked = amtool("check-config", config)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        stack = Stack(tmp)
        try:
            stack.start_exporters(SPEEDS)
            with alertmanager_running(config, tmp, time.monotonic() + 30) as manager:
                stack.wait_exporters(deadline=time.monotonic() + 60)
                stack.start_prometheus(time.monotonic() + 30, rule_files=[_rules(tmp)],
                                       alertmanager=f"127.0.0.1:{manager.port}",
                                       dead_target=False)
                deadline = time.monotonic() + 120
                wait_until("alice's e-mail", lambda: sink.mails_to(ALICE), deadline)
                wait_until("the operator's chat about the lost GPU and the ECC errors",
                           lambda: all(name in _chat_text(sink)
                                       for name in ("GpuDown", "GpuEccUncorrectedErrors")),
                           deadline)
                # The lead's mail comes 15 s after alice's: three owner group intervals, so a
                # second owner e-mail would have come by then.
                wait_until("the lead's escalation", lambda: sink.mails_to(LEAD), deadline)
                yield Run(sink, manager)
        finally:
            stack.close()


def _chat_text(sink: Sinks) -> str:
    """Every chat message the operator got, as one text (titles and attachment texts)."""
    parts = []
    for _, body in sink.posts("/operator"):
        for attachment in body.get("attachments", []):
            parts += [attachment.get("title", ""), attachment.get("text", "")]
    return "\n".join(parts)


def test_the_holder_of_the_forgotten_process_gets_exactly_one_email(run: Run) -> None:
    mails = run.sinks.mails_to(ALICE)
    assert len(mails) == 1, [m.subject for m in mails]
    mail = mails[0]
    assert "hold memory without using the GPU" in mail.subject
    body = mail.text
    assert body.startswith("Hello alice,")
    # Her process, where it is, how much it holds, how long idle, and how to end it.
    assert "lab-ws-01 GPU 2 (NVIDIA RTX A6000): pid 30958 jupyter-kernel" in body
    assert "holds 38GiB" in body
    assert "last GPU work" in body or "no GPU work seen" in body
    assert "kill 30958  # on lab-ws-01" in body
    assert "https://grafana.lab.example/d/gpu-exporter-users/?var-user=alice" in body
    # The milder idle alerts of the same user are muted: one notice, not three.
    assert "A GPU holds memory but does no work." not in body
    assert "A user holds GPU memory on hosts" not in body


def test_the_busy_user_and_everyone_else_get_nothing(run: Run) -> None:
    assert run.sinks.mails_to(BOB) == []
    assert run.sinks.recipients() <= {ALICE, LEAD, OPERATOR}, run.sinks.recipients()


def test_the_operator_gets_the_hardware_alerts_and_no_owner_alert(run: Run) -> None:
    chat = _chat_text(run.sinks)
    assert "GpuDown" in chat
    assert "GpuEccUncorrectedErrors" in chat
    mail = "\n".join(m.subject + "\n" + m.text for m in run.sinks.mails_to(OPERATOR))
    for text in (chat, mail):
        named = {a for a in OWNER_ALERTS | {escalation.ALERT} if a in text}
        assert named == set(), f"owner alerts reached the operator: {named}"
        assert "alice" not in text
    # The chat message is Slack's payload, with the channel the contacts file names.
    bodies = [body for _, body in run.sinks.posts("/operator")]
    assert {body["channel"] for body in bodies} == {"#gpu-ops"}


def _starts_at(alert: dict[str, Any]) -> float:
    return datetime.fromisoformat(alert["startsAt"].replace("Z", "+00:00")).timestamp()


def test_the_lead_hears_only_after_the_escalation_time(run: Run) -> None:
    lead = run.sinks.mails_to(LEAD)
    assert len(lead) == 1, [m.subject for m in lead]
    body = lead[0].text
    assert "Not acted on: alice" in lead[0].subject
    assert "GpuProcessIdle" in body
    assert "pid 30958" in body
    assert "kill 30958" in body
    # The escalations of alice's milder idle alerts are muted like the alerts themselves.
    assert "GpuUserMemoryIdle" not in body
    assert "GpuMemoryHeldIdle" not in body
    fired = run.manager.alerts(alertname="GpuProcessIdle", user="alice")
    assert len(fired) == 1
    assert lead[0].at >= _starts_at(fired[0]) + ESCALATE_AFTER_S
