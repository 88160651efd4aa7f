"""The contacts file: who is told about what, the one file a person edits.

``python -m dashboards.alertmanager CONTACTS`` turns it into Alertmanager's configuration
(``dashboards/notifications/contacts.example.yaml`` documents every key). Owners are mailed
at ``user@email_domain`` unless ``users`` names another address; a team's ``namespaces`` send
their pods' owner alerts to the team's address, and its ``lead`` hears the escalations of its
``members`` and namespaces. Everything else goes to ``operator``; escalations without a team
lead go to ``lead`` (else the operator).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dashboards.routing import NOT_PEOPLE, TIMINGS, Timing

_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_ADDRESS = re.compile(r"^[^@\s,]+@[^@\s,]+$")
_NAME = re.compile(r"^[A-Za-z0-9_.@-]+$")
_CHANNEL = re.compile(r"^[#@]?[^\s]+$")


class ContactsError(ValueError):
    """The contacts file is missing, unreadable or wrong; the message says where."""


@dataclass(frozen=True, slots=True)
class Chat:
    """A Slack-compatible incoming webhook (Slack, Mattermost, Rocket.Chat): its URL, or a
    file holding it (keeps the secret out of the configuration), and an optional channel."""

    webhook_url: str = ""
    webhook_url_file: str = ""
    channel: str = ""


@dataclass(frozen=True, slots=True)
class Contact:
    """Where one receiver's notices go: e-mail addresses and/or a chat webhook."""

    emails: tuple[str, ...] = ()
    chat: Chat | None = None


@dataclass(frozen=True, slots=True)
class Team:
    """A group: its namespaces' owner alerts go to ``contact``; its ``lead`` hears the
    escalations of its ``members`` (users) and namespaces."""

    name: str
    namespaces: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    contact: Contact | None = None
    lead: Contact | None = None


@dataclass(frozen=True, slots=True)
class Smtp:
    """The mail relay Alertmanager sends through."""

    smarthost: str
    sender: str
    require_tls: bool = True
    hello: str = ""
    auth_username: str = ""
    auth_password_file: str = ""


@dataclass(frozen=True, slots=True)
class Contacts:
    """The whole file, checked."""

    operator: Contact
    smtp: Smtp | None = None
    email_domain: str = ""
    lead: Contact | None = None
    grafana_url: str = ""
    site_name: str = "the GPU servers"
    not_people: tuple[str, ...] = NOT_PEOPLE
    users: Mapping[str, Contact] = field(default_factory=dict)
    teams: tuple[Team, ...] = ()
    timings: Mapping[str, Timing] = field(default_factory=lambda: dict(TIMINGS))

    def uses_email(self) -> bool:
        """Whether any receiver mails (then ``smtp`` is needed)."""
        contacts = [self.operator, self.lead, *self.users.values(),
                    *(c for t in self.teams for c in (t.contact, t.lead))]
        return bool(self.email_domain) or any(c is not None and c.emails for c in contacts)


def _fail(where: str, message: str) -> ContactsError:
    return ContactsError(f"{where}: {message}")


def _mapping(value: Any, where: str, keys: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"expected a mapping, got {type(value).__name__}")
    unknown = sorted(set(map(str, value)) - keys)
    if unknown:
        known = ", ".join(sorted(keys))
        raise _fail(where, f"unknown key(s) {', '.join(unknown)} (known: {known})")
    return {str(k): v for k, v in value.items()}


def _text(value: Any, where: str, pattern: re.Pattern[str] | None = None) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, "expected a non-empty string")
    if pattern is not None and not pattern.match(value):
        raise _fail(where, f"{value!r} is not valid here")
    return value


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _fail(where, "expected a list of names")
    return tuple(_text(v, f"{where}[{i}]", _NAME) for i, v in enumerate(value))


def _contact(value: Any, where: str) -> Contact:
    """``address``, ``[addresses]`` or ``{email: ..., chat: {...}}``."""
    if isinstance(value, (str, list)):
        value = {"email": value}
    data = _mapping(value, where, {"email", "chat"})
    emails = data.get("email", [])
    if isinstance(emails, str):
        emails = [emails]
    if not isinstance(emails, list):
        raise _fail(f"{where}.email", "expected an address or a list of addresses")
    addresses = tuple(_text(e, f"{where}.email[{i}]", _ADDRESS) for i, e in enumerate(emails))
    chat = _chat(data["chat"], f"{where}.chat") if "chat" in data else None
    if not addresses and chat is None:
        raise _fail(where, "needs an e-mail address or a chat webhook")
    return Contact(addresses, chat)


def _chat(value: Any, where: str) -> Chat:
    data = _mapping(value, where, {"webhook_url", "webhook_url_file", "channel"})
    url = data.get("webhook_url", "")
    url_file = data.get("webhook_url_file", "")
    if bool(url) == bool(url_file):
        raise _fail(where, "needs exactly one of webhook_url and webhook_url_file")
    if url and not _text(url, f"{where}.webhook_url").startswith(("http://", "https://")):
        raise _fail(f"{where}.webhook_url", "must be an http(s) URL")
    if url_file:
        _text(url_file, f"{where}.webhook_url_file")
    channel = _text(data["channel"], f"{where}.channel", _CHANNEL) if "channel" in data else ""
    return Chat(url, url_file, channel)


def _smtp(value: Any, where: str) -> Smtp:
    data = _mapping(value, where, {"smarthost", "from", "require_tls", "hello", "auth_username",
                                   "auth_password_file"})
    for key in ("smarthost", "from"):
        if key not in data:
            raise _fail(where, f"missing {key}")
    smarthost = _text(data["smarthost"], f"{where}.smarthost")
    if not re.match(r"^[^\s:]+:[0-9]+$", smarthost) and not re.match(r"^\[.+\]:[0-9]+$",
                                                                      smarthost):
        raise _fail(f"{where}.smarthost", f"{smarthost!r} is not host:port")
    require_tls = data.get("require_tls", True)
    if not isinstance(require_tls, bool):
        raise _fail(f"{where}.require_tls", "expected true or false")
    return Smtp(
        smarthost=smarthost,
        sender=_text(data["from"], f"{where}.from", _ADDRESS),
        require_tls=require_tls,
        hello=_text(data["hello"], f"{where}.hello") if "hello" in data else "",
        auth_username=(_text(data["auth_username"], f"{where}.auth_username")
                       if "auth_username" in data else ""),
        auth_password_file=(_text(data["auth_password_file"], f"{where}.auth_password_file")
                            if "auth_password_file" in data else ""),
    )


def _timings(value: Any, where: str) -> dict[str, Timing]:
    data = _mapping(value, where, set(TIMINGS))
    timings = dict(TIMINGS)
    for kind, given in data.items():
        fields = _mapping(given, f"{where}.{kind}",
                          {"group_wait", "group_interval", "repeat_interval"})
        base = timings[kind]
        values = {name: _text(fields.get(name, getattr(base, name)), f"{where}.{kind}.{name}",
                              _DURATION)
                  for name in ("group_wait", "group_interval", "repeat_interval")}
        timings[kind] = Timing(**values)
    return timings


def _team(name: str, value: Any, where: str) -> Team:
    data = _mapping(value, where, {"namespaces", "members", "email", "chat", "lead"})
    contact_keys = {k: data[k] for k in ("email", "chat") if k in data}
    contact = _contact(contact_keys, where) if contact_keys else None
    team = Team(
        name=_text(name, where, _NAME),
        namespaces=_names(data.get("namespaces", []), f"{where}.namespaces"),
        members=_names(data.get("members", []), f"{where}.members"),
        contact=contact,
        lead=_contact(data["lead"], f"{where}.lead") if "lead" in data else None,
    )
    if team.namespaces and team.contact is None:
        raise _fail(where, "a team with namespaces needs an email or chat for them")
    if team.members and team.lead is None:
        raise _fail(where, "members only matter for escalations: give the team a lead")
    if not team.namespaces and not team.members:
        raise _fail(where, "needs namespaces or members")
    return team


def parse(data: Any, where: str = "contacts") -> Contacts:
    """Check a loaded contacts document.

    Raises:
        ContactsError: a key is unknown, missing or has a wrong value.
    """
    doc = _mapping(data, where, {"operator", "smtp", "email_domain", "lead", "grafana_url",
                                 "site_name", "not_people", "users", "teams", "timings"})
    if "operator" not in doc:
        raise _fail(where, "missing operator (who hears hardware alerts and unknown owners)")
    domain = doc.get("email_domain", "")
    if domain:
        _text(domain, f"{where}.email_domain", re.compile(r"^[A-Za-z0-9.-]+\.[A-Za-z]{2,}$"))
    grafana = doc.get("grafana_url", "")
    if grafana and not re.match(r'^https?://[^"\s{}]+$', _text(grafana, f"{where}.grafana_url")):
        raise _fail(f"{where}.grafana_url", "must be an http(s) URL")
    users = _mapping(doc.get("users", {}), f"{where}.users", set(map(str, doc.get("users") or {})))
    teams = _mapping(doc.get("teams", {}), f"{where}.teams", set(map(str, doc.get("teams") or {})))
    contacts = Contacts(
        operator=_contact(doc["operator"], f"{where}.operator"),
        smtp=_smtp(doc["smtp"], f"{where}.smtp") if "smtp" in doc else None,
        email_domain=domain,
        lead=_contact(doc["lead"], f"{where}.lead") if "lead" in doc else None,
        grafana_url=grafana.rstrip("/"),
        site_name=_text(doc.get("site_name", "the GPU servers"), f"{where}.site_name",
                        re.compile(r"^[^{}]+$")),
        not_people=_names(doc.get("not_people", list(NOT_PEOPLE)), f"{where}.not_people"),
        users={_text(n, f"{where}.users", _NAME): _contact(c, f"{where}.users.{n}")
               for n, c in users.items()},
        teams=tuple(_team(n, t, f"{where}.teams.{n}") for n, t in teams.items()),
        timings=_timings(doc.get("timings", {}), f"{where}.timings"),
    )
    namespaces = [ns for team in contacts.teams for ns in team.namespaces]
    if len(set(namespaces)) != len(namespaces):
        raise _fail(f"{where}.teams", "a namespace belongs to more than one team")
    if contacts.uses_email() and contacts.smtp is None:
        raise _fail(where, "e-mail receivers need smtp (smarthost and from)")
    return contacts


def load(path: Path) -> Contacts:
    """Read and check a contacts file.

    Raises:
        ContactsError: the file cannot be read, is not YAML, or is wrong.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ContactsError(f"{path}: cannot read: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ContactsError(f"{path}: not valid YAML: {exc}") from exc
    return parse(data, str(path))
