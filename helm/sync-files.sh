#!/usr/bin/env bash
# Copy the repository's rule files and dashboards into the chart (Helm cannot read files outside
# the chart directory). The copies must stay byte-identical: tests/deploy checks it.
#   helm/sync-files.sh          refresh helm/gpu-exporter/files/{rules,dashboards}
#   helm/sync-files.sh --check  exit 1 (listing the differences) if the copies are out of date
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
files="$root/helm/gpu-exporter/files"
# pairs: source directory, glob, destination directory (top level only: rules/tests/ is not rules)
pairs=("dashboards/rules" "*.yaml" "rules" "dashboards/grafana" "*.json" "dashboards")

check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

status=0
for ((i = 0; i < ${#pairs[@]}; i += 3)); do
  src="$root/${pairs[i]}" glob="${pairs[i + 1]}" dst="$files/${pairs[i + 2]}"
  if [ ! -d "$src" ]; then
    echo "missing source directory ${pairs[i]}" >&2
    exit 1
  fi
  mkdir -p "$dst"
  shopt -s nullglob
  wanted=()
  for f in "$src"/$glob; do
    name="$(basename "$f")"
    wanted+=("$name")
    if ! cmp -s "$f" "$dst/$name"; then
      if $check; then echo "out of date: ${pairs[i + 2]}/$name (from ${pairs[i]}/$name)"; status=1
      else cp "$f" "$dst/$name"; echo "copied ${pairs[i]}/$name"; fi
    fi
  done
  for f in "$dst"/$glob; do
    name="$(basename "$f")"
    if [[ ! " ${wanted[*]} " == *" $name "* ]]; then
      if $check; then echo "stale copy: ${pairs[i + 2]}/$name (no ${pairs[i]}/$name)"; status=1
      else rm "$f"; echo "removed stale ${pairs[i + 2]}/$name"; fi
    fi
  done
  shopt -u nullglob
done
if $check && [ $status -ne 0 ]; then
  echo "run helm/sync-files.sh to refresh the chart's copies" >&2
fi
exit $status
