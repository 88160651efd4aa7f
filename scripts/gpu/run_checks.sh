#!/usr/bin/env bash
# The GPU checks of docs/gpu-verification.md in one go, on a GPU machine, as root, from the
# repository's root with the runtime wheels installed on PYTHONPATH. Each check's figures go to
# $OUT/<name>.json and all output to $OUT/checks-<set>.log (OUT defaults to ./gpu-results); a
# table of outcomes is printed last.
#   bash scripts/gpu/run_checks.sh core      # tests/gpu and the checks of the exporter (~6 min)
#   bash scripts/gpu/run_checks.sh more      # timing, health, publisher, last active, TLS (~6 min)
#   bash scripts/gpu/run_checks.sh all
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-$PWD/gpu-results} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
set_name=${1:-all}
log=$OUT/checks-$set_name.log
: >"$log"
results=()

check() {  # check NAME COMMAND...
  local name=$1 start rc
  shift
  echo "=== $name: $*"
  start=$(date +%s)
  "$@" 2>&1 | tee -a "$log" | tail -n 25
  rc=${PIPESTATUS[0]}
  results+=("$(printf '%-22s rc=%-3s %4ss' "$name" "$rc" "$(($(date +%s) - start))")")
}

if [ "$set_name" = core ] || [ "$set_name" = all ]; then
  check tests_gpu python3 -m pytest tests/gpu -m gpu -q -p no:cacheprovider
  check exporter python3 scripts/gpu/check_exporter.py --json "$OUT/e2e.json"
  check throttle_time python3 scripts/gpu/check_throttle_time.py --json "$OUT/throttle_time.json"
  check attribution python3 scripts/gpu/check_attribution.py --json "$OUT/attribution.json"
  check activity python3 scripts/gpu/check_activity.py --json "$OUT/activity.json"
fi
if [ "$set_name" = more ] || [ "$set_name" = all ]; then
  check nvml_timing python3 scripts/gpu/nvml_timing.py --iterations 300 --json "$OUT/timing.json"
  check health python3 scripts/gpu/check_health.py --iterations 2000 --exporter --scrapes 300 \
    --json "$OUT/health.json"
  check torch_publisher python3 scripts/gpu/check_torch_publisher.py --json "$OUT/torch.json"
  check last_active python3 scripts/gpu/check_last_active.py
  check secure_exporter python3 scripts/gpu/check_secure_exporter.py --json "$OUT/secure.json"
  check parallel_calls python3 scripts/gpu/parallel_calls.py
fi
echo "=== summary ($set_name)"
printf '%s\n' "${results[@]}"
