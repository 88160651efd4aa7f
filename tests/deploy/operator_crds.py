"""The fields the Prometheus Operator CRDs (monitoring.coreos.com/v1 and, for
AlertmanagerConfig, v1alpha1) require, as JSON Schemas.

A trimmed copy of what the CRDs' openAPIV3Schema demands of the objects this chart renders:
required keys, types, the Duration pattern and the relabel action enum. Enough to catch a
misspelt key or a wrong type; kubernetes-validate has no schemas for these kinds.
"""

from __future__ import annotations

from typing import Any

import jsonschema

#: prometheus-operator's Duration type.
DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
    r"(([0-9]+)ms)?)$",
}


def _closed(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    """An object with these properties only (the CRDs reject unknown keys), ``required`` set."""
    schema: dict[str, Any] = {"type": "object", "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return {**schema, "properties": properties}


_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_LABEL_NAME = {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"}
_RELABEL = _closed({
    "action": {"enum": [
        "replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod",
        "labelmap", "LabelMap", "labeldrop", "LabelDrop", "labelkeep", "LabelKeep",
        "lowercase", "Lowercase", "uppercase", "Uppercase", "keepequal", "KeepEqual",
        "dropequal", "DropEqual",
    ]},
    "sourceLabels": {"type": "array", "items": _LABEL_NAME},
    "separator": {"type": "string"},
    "targetLabel": {"type": "string"},
    "regex": {"type": "string"},
    "modulus": {"type": "integer"},
    "replacement": {"type": "string"},
})
_SELECTOR = _closed({"matchLabels": _STR_MAP, "matchExpressions": {"type": "array"}})
_SECRET_KEY = _closed(
    {"name": {"type": "string"}, "key": {"type": "string"}, "optional": {"type": "boolean"}}, "key"
)
_SECRET_OR_CONFIGMAP = _closed({"secret": _SECRET_KEY, "configMap": _SECRET_KEY})
#: SafeTLSConfig (ServiceMonitor endpoints also take caFile/certFile/keyFile).
_TLS_CONFIG = _closed({
    "ca": _SECRET_OR_CONFIGMAP, "cert": _SECRET_OR_CONFIGMAP, "keySecret": _SECRET_KEY,
    "serverName": {"type": "string"}, "insecureSkipVerify": {"type": "boolean"},
    "minVersion": {"enum": ["TLS10", "TLS11", "TLS12", "TLS13"]},
    "maxVersion": {"enum": ["TLS10", "TLS11", "TLS12", "TLS13"]},
    "caFile": {"type": "string"}, "certFile": {"type": "string"},
    "keyFile": {"type": "string"},
})
_BASIC_AUTH = _closed({"username": _SECRET_KEY, "password": _SECRET_KEY})
_ENDPOINT = _closed({
    "port": {"type": "string", "minLength": 1},
    "path": {"type": "string"},
    "interval": DURATION,
    "scrapeTimeout": DURATION,
    "honorLabels": {"type": "boolean"},
    "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
    "tlsConfig": _TLS_CONFIG,
    "basicAuth": _BASIC_AUTH,
    "relabelings": {"type": "array", "items": _RELABEL},
    "metricRelabelings": {"type": "array", "items": _RELABEL},
}, "port")
_META = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                   "labels": _STR_MAP, "annotations": _STR_MAP},
}


def _object(kind: str, spec: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    return _closed({
        "apiVersion": {"const": f"monitoring.coreos.com/{version}"},
        "kind": {"const": kind},
        "metadata": _META,
        "spec": spec,
    }, "apiVersion", "kind", "metadata", "spec")


_NAMESPACE_SELECTOR = {
    "type": "object",
    "properties": {"any": {"type": "boolean"},
                   "matchNames": {"type": "array", "items": {"type": "string"}}},
}
_RULE = {
    **_closed({
        "alert": {"type": "string", "minLength": 1},
        "record": {"type": "string", "minLength": 1},
        "expr": {"type": ["string", "integer"]},
        "for": DURATION,
        "keep_firing_for": DURATION,
        "labels": _STR_MAP,
        "annotations": _STR_MAP,
    }, "expr"),
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
}


def _monitor(kind: str, endpoints: str) -> dict[str, Any]:
    """ServiceMonitor and PodMonitor differ only in the name of their endpoint list."""
    return _object(kind, _closed({
        "jobLabel": {"type": "string"},
        "selector": _SELECTOR,
        "namespaceSelector": _NAMESPACE_SELECTOR,
        endpoints: {"type": "array", "minItems": 1, "items": _ENDPOINT},
    }, "selector", endpoints))


#: AlertmanagerConfig (v1alpha1): Route, Matcher, EmailConfig, SlackConfig, InhibitRule.
_MATCHER = _closed({"name": {"type": "string", "minLength": 1}, "value": {"type": "string"},
                    "matchType": {"enum": ["=", "!=", "=~", "!~"]}, "regex": {"type": "boolean"}},
                   "name")
_NON_EMPTY_DURATION = {**DURATION, "minLength": 1}
_ROUTE_FIELDS = {
    "receiver": {"type": "string"},
    "groupBy": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    "groupWait": _NON_EMPTY_DURATION,
    "groupInterval": _NON_EMPTY_DURATION,
    "repeatInterval": _NON_EMPTY_DURATION,
    "matchers": {"type": "array", "items": _MATCHER},
    "continue": {"type": "boolean"},
    "muteTimeIntervals": {"type": "array", "items": {"type": "string"}},
    "activeTimeIntervals": {"type": "array", "items": {"type": "string"}},
}
#: The CRD leaves child routes unchecked (JSON); the Operator decodes them as Routes,
#: rejecting unknown fields, so they are checked as Routes here.
_CHILD_ROUTE = _closed({**_ROUTE_FIELDS, "routes": {"type": "array"}})
_ROUTE = _closed({**_ROUTE_FIELDS, "routes": {"type": "array", "items": _CHILD_ROUTE}})
_KEY_VALUE = _closed({"key": {"type": "string", "minLength": 1}, "value": {"type": "string"}},
                     "key", "value")
_EMAIL = _closed({
    "sendResolved": {"type": "boolean"},
    "to": {"type": "string", "minLength": 1},
    "from": {"type": "string", "minLength": 1},
    "hello": {"type": "string", "minLength": 1},
    "smarthost": {"type": "string", "minLength": 1},
    "authUsername": {"type": "string", "minLength": 1},
    "authPassword": _SECRET_KEY,
    "authSecret": _SECRET_KEY,
    "authIdentity": {"type": "string", "minLength": 1},
    "headers": {"type": "array", "items": _KEY_VALUE},
    "html": {"type": "string"},
    "text": {"type": "string", "minLength": 1},
    "requireTLS": {"type": "boolean"},
    "tlsConfig": _TLS_CONFIG,
})
_SLACK = _closed({
    "sendResolved": {"type": "boolean"},
    "apiURL": _SECRET_KEY,
    "channel": {"type": "string", "minLength": 1},
    "username": {"type": "string", "minLength": 1},
    "color": {"type": "string", "minLength": 1},
    "title": {"type": "string", "minLength": 1},
    "titleLink": {"type": "string"},
    "pretext": {"type": "string", "minLength": 1},
    "text": {"type": "string", "minLength": 1},
    "footer": {"type": "string", "minLength": 1},
    "fallback": {"type": "string", "minLength": 1},
    "iconEmoji": {"type": "string", "minLength": 1},
    "iconURL": {"type": "string"},
    "linkNames": {"type": "boolean"},
    "mrkdwnIn": {"type": "array", "items": {"type": "string", "minLength": 1}},
})
_RECEIVER = _closed({
    "name": {"type": "string", "minLength": 1},
    "emailConfigs": {"type": "array", "items": _EMAIL},
    "slackConfigs": {"type": "array", "items": _SLACK},
    "webhookConfigs": {"type": "array"},
}, "name")
_INHIBIT = _closed({"equal": {"type": "array", "items": {"type": "string"}},
                    "sourceMatch": {"type": "array", "items": _MATCHER},
                    "targetMatch": {"type": "array", "items": _MATCHER}})

SCHEMAS: dict[str, dict[str, Any]] = {
    "AlertmanagerConfig": _object("AlertmanagerConfig", _closed({
        "route": _ROUTE,
        "receivers": {"type": "array", "items": _RECEIVER},
        "inhibitRules": {"type": "array", "items": _INHIBIT},
        "muteTimeIntervals": {"type": "array"},
    }), version="v1alpha1"),
    "ServiceMonitor": _monitor("ServiceMonitor", "endpoints"),
    "PodMonitor": _monitor("PodMonitor", "podMetricsEndpoints"),
    "PrometheusRule": _object("PrometheusRule", _closed({
        "groups": {
            "type": "array",
            "minItems": 1,
            "items": _closed({
                "name": {"type": "string", "minLength": 1},
                "interval": DURATION,
                "query_offset": DURATION,
                "limit": {"type": "integer"},
                "labels": _STR_MAP,
                "partial_response_strategy": {"type": "string"},
                "rules": {"type": "array", "items": _RULE},
            }, "name", "rules"),
        },
    }, "groups")),
}


def validate(obj: dict[str, Any]) -> None:
    """Check one Prometheus Operator object against its trimmed CRD schema.

    Raises:
        KeyError: the kind is not one of ``SCHEMAS``.
        jsonschema.ValidationError: the object misses a required field or has a wrong type.
    """
    jsonschema.Draft202012Validator(SCHEMAS[obj["kind"]]).validate(obj)
