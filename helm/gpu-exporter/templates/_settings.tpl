{{- /*
The site settings (prometheusRule.thresholds, .selectors, .cost; docs/settings.md) put into the
rules. The rule copies under files/ are generated with each setting as a placeholder:
⟦key⟧ (a PromQL number, or the text of a duration or selector), ⟦key|.0%⟧ (a percentage in a
description), ⟦key|.0f⟧ (a whole number), ⟦key|gib⟧ (bytes in GiB), ⟦key|seconds⟧ (a duration in
seconds). These helpers write a value the way the generator's Python does
(dashboards/settings.py, dashboards/promql.py), so that the chart and
`python -m dashboards.generate --config` give the same rules for the same settings
(tests/deploy/test_chart_settings.py).
*/ -}}

{{/* A number as PromQL text: 0.9, 80, 4294967296 (promql.num). */}}
{{- define "gpu-exporter.num" -}}
{{- $v := float64 . -}}
{{- if eq $v (floor $v) }}{{ printf "%.0f" $v }}{{ else }}{{ printf "%v" $v }}{{ end -}}
{{- end }}

{{/* A duration of one unit (5m, 1h) in seconds (promql.seconds_text). */}}
{{- define "gpu-exporter.seconds" -}}
{{- $unit := get (dict "s" 1 "m" 60 "h" 3600 "d" 86400 "w" 604800) (regexFind "[smhdw]$" .) -}}
{{- mul (regexFind "^[0-9]+" . | atoi) $unit -}}
{{- end }}

{{/* Per GPU its price per GPU-hour by model, first match first (cost.price_chain). */}}
{{- define "gpu-exporter.cost.chain" -}}
{{- $parts := list }}
{{- range .gpuHourPrices }}
{{- $parts = append $parts (printf "gpu_info{name=~\"%s\"} * 0 + %s" .model (include "gpu-exporter.num" .price)) }}
{{- end }}
{{- if not (kindIs "invalid" .defaultGpuHourPrice) }}
{{- $parts = append $parts (printf "gpu_info * 0 + %s" (include "gpu-exporter.num" .defaultGpuHourPrice)) }}
{{- end }}
{{- join " or " $parts -}}
{{- end }}

{{/* Every placeholder's value, as JSON: the settings, the currency, the prices. */}}
{{- define "gpu-exporter.settings.values" -}}
{{- $rule := .Values.prometheusRule }}
{{- $cost := $rule.cost }}
{{- $values := merge (dict) $rule.thresholds $rule.selectors }}
{{- $_ := set $values "currency" $cost.currency }}
{{- $_ := set $values "gpuHourPrices" (include "gpu-exporter.cost.chain" $cost) }}
{{- if not (kindIs "invalid" $cost.kwhPrice) }}
{{- $_ := set $values "kwhPrice" $cost.kwhPrice }}
{{- end }}
{{- toJson $values }}
{{- end }}

{{/* .text with every placeholder of .values replaced. */}}
{{- define "gpu-exporter.settings.text" -}}
{{- $text := .text }}
{{- if contains "⟦" $text }}
{{- range $key, $value := .values }}
{{- if contains (printf "⟦%s" $key) $text }}
{{- if kindIs "string" $value }}
{{- $text = replace (printf "⟦%s⟧" $key) $value $text }}
{{- if contains (printf "⟦%s|seconds⟧" $key) $text }}
{{- $text = replace (printf "⟦%s|seconds⟧" $key) (include "gpu-exporter.seconds" $value) $text }}
{{- end }}
{{- else }}
{{- $v := float64 $value }}
{{- $text = replace (printf "⟦%s⟧" $key) (include "gpu-exporter.num" $v) $text }}
{{- $text = replace (printf "⟦%s|.0%%⟧" $key) (printf "%.0f%%" (mulf $v 100)) $text }}
{{- $text = replace (printf "⟦%s|.0f⟧" $key) (printf "%.0f" $v) $text }}
{{- $text = replace (printf "⟦%s|gib⟧" $key) (include "gpu-exporter.num" (divf $v 1073741824)) $text }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if contains "⟦" $text }}
{{- fail (printf "prometheusRule: a rule holds a setting the values lack: %s" $text) }}
{{- end }}
{{- $text -}}
{{- end }}

{{/* Puts the values into one rule (a map from a rule file), in place. */}}
{{- define "gpu-exporter.settings.rule" -}}
{{- $rule := .rule }}
{{- $values := .values }}
{{- range $field := list "expr" "for" }}
{{- if hasKey $rule $field }}
{{- $_ := set $rule $field (include "gpu-exporter.settings.text" (dict "text" (get $rule $field) "values" $values)) }}
{{- end }}
{{- end }}
{{- range $field := list "labels" "annotations" }}
{{- $map := get $rule $field }}
{{- if $map }}
{{- range $key, $text := $map }}
{{- $_ := set $map $key (include "gpu-exporter.settings.text" (dict "text" $text "values" $values)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The cost group as JSON ({"groups": [...]}, none without prices): files/cost/'s copy without
the rules the values do not price, the team mapping's series first (cost.groups).
*/}}
{{- define "gpu-exporter.cost.groups" -}}
{{- $cost := .Values.prometheusRule.cost }}
{{- $gpu := or (gt (len $cost.gpuHourPrices) 0) (not (kindIs "invalid" $cost.defaultGpuHourPrice)) }}
{{- $kwh := not (kindIs "invalid" $cost.kwhPrice) }}
{{- $teams := or (gt (len $cost.teams.users) 0) (gt (len $cost.teams.namespaces) 0) }}
{{- $groups := list }}
{{- if or $gpu $kwh }}
{{- if not $cost.currency }}
{{- fail "prometheusRule.cost: prices need a currency (cost.currency: EUR, USD, ...)" }}
{{- end }}
{{- $infos := list }}
{{- range $user, $team := $cost.teams.users }}
{{- $infos = append $infos (dict "record" "gpu_team_info" "expr" "vector(1)" "labels" (dict "user" $user "team" $team)) }}
{{- end }}
{{- range $namespace, $team := $cost.teams.namespaces }}
{{- $infos = append $infos (dict "record" "gpu_team_info" "expr" "vector(1)" "labels" (dict "namespace" $namespace "team" $team)) }}
{{- end }}
{{- range $path, $_ := .Files.Glob "files/cost/*.yaml" }}
{{- range ($.Files.Get $path | fromYaml).groups }}
{{- $kept := $infos }}
{{- range .rules }}
{{- $name := .record }}
{{- $keep := true }}
{{- if and (contains "_energy_cost_" $name) (not $kwh) }}{{ $keep = false }}{{ end }}
{{- if and (or (hasPrefix "instance:" $name) (regexMatch "_(held|used|idle)_cost_" $name)) (not $gpu) }}{{ $keep = false }}{{ end }}
{{- if and (hasPrefix "instance_team:" $name) (not $teams) }}{{ $keep = false }}{{ end }}
{{- if $keep }}{{ $kept = append $kept . }}{{ end }}
{{- end }}
{{- $_ := set . "rules" $kept }}
{{- $groups = append $groups . }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson (dict "groups" $groups) }}
{{- end }}
