"""The fields the Prometheus Operator CRDs (monitoring.coreos.com/v1) require, as JSON Schemas.

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
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_LABEL_NAME = {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"}
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
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
    },
}
_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"matchLabels": _STR_MAP, "matchExpressions": {"type": "array"}},
}
_SECRET_KEY = {
    "type": "object",
    "additionalProperties": False,
    "required": ["key"],
    "properties": {"name": {"type": "string"}, "key": {"type": "string"},
                   "optional": {"type": "boolean"}},
}
_SECRET_OR_CONFIGMAP = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"secret": _SECRET_KEY, "configMap": _SECRET_KEY},
}
#: SafeTLSConfig (ServiceMonitor endpoints also take caFile/certFile/keyFile).
_TLS_CONFIG = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "ca": _SECRET_OR_CONFIGMAP, "cert": _SECRET_OR_CONFIGMAP, "keySecret": _SECRET_KEY,
        "serverName": {"type": "string"}, "insecureSkipVerify": {"type": "boolean"},
        "minVersion": {"enum": ["TLS10", "TLS11", "TLS12", "TLS13"]},
        "maxVersion": {"enum": ["TLS10", "TLS11", "TLS12", "TLS13"]},
        "caFile": {"type": "string"}, "certFile": {"type": "string"},
        "keyFile": {"type": "string"},
    },
}
_BASIC_AUTH = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"username": _SECRET_KEY, "password": _SECRET_KEY},
}
_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["port"],
    "properties": {
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
    },
}
_META = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                   "labels": _STR_MAP, "annotations": _STR_MAP},
}


def _object(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": _META,
            "spec": spec,
        },
    }


_NAMESPACE_SELECTOR = {
    "type": "object",
    "properties": {"any": {"type": "boolean"},
                   "matchNames": {"type": "array", "items": {"type": "string"}}},
}
_RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["expr"],
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
    "properties": {
        "alert": {"type": "string", "minLength": 1},
        "record": {"type": "string", "minLength": 1},
        "expr": {"type": ["string", "integer"]},
        "for": DURATION,
        "keep_firing_for": DURATION,
        "labels": _STR_MAP,
        "annotations": _STR_MAP,
    },
}

def _monitor(kind: str, endpoints: str) -> dict[str, Any]:
    """ServiceMonitor and PodMonitor differ only in the name of their endpoint list."""
    return _object(kind, {
        "type": "object",
        "additionalProperties": False,
        "required": ["selector", endpoints],
        "properties": {
            "jobLabel": {"type": "string"},
            "selector": _SELECTOR,
            "namespaceSelector": _NAMESPACE_SELECTOR,
            endpoints: {"type": "array", "minItems": 1, "items": _ENDPOINT},
        },
    })


SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": _monitor("ServiceMonitor", "endpoints"),
    "PodMonitor": _monitor("PodMonitor", "podMetricsEndpoints"),
    "PrometheusRule": _object("PrometheusRule", {
        "type": "object",
        "additionalProperties": False,
        "required": ["groups"],
        "properties": {
            "groups": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "rules"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "interval": DURATION,
                        "query_offset": DURATION,
                        "limit": {"type": "integer"},
                        "labels": _STR_MAP,
                        "partial_response_strategy": {"type": "string"},
                        "rules": {"type": "array", "items": _RULE},
                    },
                },
            },
        },
    }),
}


def validate(obj: dict[str, Any]) -> None:
    """Check one Prometheus Operator object against its trimmed CRD schema.

    Raises:
        KeyError: the kind is not one of ``SCHEMAS``.
        jsonschema.ValidationError: the object misses a required field or has a wrong type.
    """
    jsonschema.Draft202012Validator(SCHEMAS[obj["kind"]]).validate(obj)
