"""values.schema.json rejects wrong types and unknown keys, naming the key."""

from __future__ import annotations

import json
from typing import Any

import helm_python
import pytest
import yaml

from tests.deploy.helm_render import CHART_DIR, chart, render

#: id -> (bad values, text the error must contain)
BAD: dict[str, tuple[dict[str, Any], str]] = {
    "unknown-top-level-key": ({"hostPid": True}, "'hostPid' not allowed"),
    "hostpid-not-bool": ({"hostPID": "yes"}, "/hostPID"),
    "unknown-monitor-key": ({"monitor": {"enable": True}}, "'enable' not allowed"),
    "monitor-kind": ({"monitor": {"kind": "Probe"}}, "/monitor/kind"),
    "interval-not-duration": ({"monitor": {"interval": 15}}, "/monitor/interval"),
    "interval-bad-unit": ({"monitor": {"interval": "15 seconds"}}, "/monitor/interval"),
    "labels-not-strings": ({"monitor": {"additionalLabels": {"release": 1}}},
                           "/monitor/additionalLabels/release"),
    "port-range": ({"port": 70000}, "/port"),
    "port-type": ({"port": "9477"}, "/port"),
    "extra-args-not-flags": ({"extraArgs": ["collector.energy"]}, "/extraArgs/0"),
    "disabled-groups-not-list": ({"prometheusRule": {"disabledGroups": "gpu-thermal"}},
                                 "/prometheusRule/disabledGroups"),
    "unknown-dashboards-key": ({"dashboards": {"labels": {}}}, "'labels' not allowed"),
    "kubernetes-relative-dir": ({"kubernetes": {"podLogsDir": "var/log/pods"}},
                                "/kubernetes/podLogsDir"),
    "pod-resources-relative-dir": (
        {"kubernetes": {"podResources": {"directory": "var/lib/kubelet/pod-resources"}}},
        "/kubernetes/podResources/directory"),
    "pod-resources-limit-unbounded": ({"kubernetes": {"podResources": {"maxBytes": 1 << 30}}},
                                      "/kubernetes/podResources/maxBytes"),
    "pod-resources-interval": ({"kubernetes": {"podResources": {"interval": 5}}},
                               "/kubernetes/podResources/interval"),
    "log-format": ({"log": {"format": "text"}}, "/log/format"),
    "tolerations-not-list": ({"tolerations": {"key": "nvidia.com/gpu"}}, "/tolerations"),
    "image-digest": ({"image": {"digest": "latest"}}, "/image/digest"),
    "update-strategy-type": ({"updateStrategy": {"type": "Recreate"}}, "/updateStrategy/type"),
    "probe-unknown-key": ({"livenessProbe": {"timeout": 5}}, "'timeout' not allowed"),
    "threshold-unknown": ({"prometheusRule": {"thresholds": {"memoryUsed": 0.9}}},
                          "'memoryUsed' not allowed"),
    "threshold-ratio-range": ({"prometheusRule": {"thresholds": {"memoryUsedRatio": 90}}},
                              "/prometheusRule/thresholds/memoryUsedRatio"),
    "threshold-duration": ({"prometheusRule": {"thresholds": {"idleFor": "1 hour"}}},
                           "/prometheusRule/thresholds/idleFor"),
    "threshold-bytes-whole": ({"prometheusRule": {"thresholds": {"idleUserMemoryBytes": 1.5}}},
                              "/prometheusRule/thresholds/idleUserMemoryBytes"),
    "selector-quote": ({"prometheusRule": {"selectors": {"exporterJob": 'a"b'}}},
                       "/prometheusRule/selectors/exporterJob"),
    "price-negative": ({"prometheusRule": {"cost": {"kwhPrice": -0.1}}},
                       "/prometheusRule/cost/kwhPrice"),
    "price-without-model": ({"prometheusRule": {"cost": {"gpuHourPrices": [{"price": 1}]}}},
                            "/prometheusRule/cost/gpuHourPrices/0"),
    "currency-quote": ({"prometheusRule": {"cost": {"currency": 'E"R'}}},
                       "/prometheusRule/cost/currency"),
    "team-not-string": ({"prometheusRule": {"cost": {"teams": {"users": {"alice": 1}}}}},
                        "/prometheusRule/cost/teams/users/alice"),
}


def test_defaults_pass_the_schema() -> None:
    chart().validate_schema({})
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    chart().validate_schema(values)


def test_every_default_key_is_described_by_the_schema() -> None:
    """The schema's properties and values.yaml's keys are the same set (both directions)."""
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) - {"global"} == set(values)
    for key, sub in schema["properties"].items():
        if sub.get("additionalProperties") is False:
            assert set(sub["properties"]) >= set(values[key]), key


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_values_are_rejected_naming_the_key(case: str) -> None:
    values, expected = BAD[case]
    with pytest.raises(helm_python.HelmValuesError) as caught:
        chart().validate_schema(values)
    assert expected in str(caught.value)
    with pytest.raises(helm_python.HelmValuesError, match="schema"):
        render(values)
