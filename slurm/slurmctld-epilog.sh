#!/bin/sh
# Slurm EpilogSlurmctld: store the job's GPU summary in its AdminComment, in Jobstats' format
# (JS1: + base64(gzip(JSON)), Jobstats' fields unchanged, gpu-exporter's added), so that
# `jobstats JOBID` and `gpu-exporter report job JOBID` read it after Prometheus' retention.
#
# slurm.conf: EpilogSlurmctld=/path/to/slurmctld-epilog.sh (and accounting through slurmdbd:
# the summary is stored with `sacctmgr update job`). Settings, from the environment or
# /etc/gpu-exporter/slurmctld-epilog.conf (shell assignments; GPU_EXPORTER_EPILOG_CONFIG
# names another file):
#   PROMETHEUS_URL    Prometheus (or Thanos, VictoriaMetrics) holding the exporters' series
#   MATCH             label matchers of this cluster's series, e.g. cluster="della"
#   STEP              sampling step of the figures (default 30s; the scrape interval)
#   WAIT              seconds to wait first, for the job's last scrape (default 5)
#   GPU_EXPORTER      the gpu-exporter command (default: gpu-exporter on PATH)
#   REPORT_FLAGS      more flags (TLS, --prometheus.bearer-token-file ...)
# Jobs without GPU data are stored as JS1:None, as Jobstats does. Always exits 0 (slurmctld
# only logs a failing epilog); the outcome goes to syslog.
config=${GPU_EXPORTER_EPILOG_CONFIG:-/etc/gpu-exporter/slurmctld-epilog.conf}
# shellcheck disable=SC1090
[ -r "$config" ] && . "$config"
job=${SLURM_JOB_ID:-}
case "$job" in ''|*[!0-9]*) exit 0 ;; esac

say() {
    logger -t gpu-exporter-epilog "job ${job}: $*" 2>/dev/null
    echo "gpu-exporter epilog: job ${job}: $*" >&2
}

sleep "${WAIT:-5}"
# shellcheck disable=SC2086
if out=$("${GPU_EXPORTER:-gpu-exporter}" report job "$job" --store --format jobstats \
        --prometheus.url "${PROMETHEUS_URL:-http://localhost:9090}" --match "${MATCH:-}" \
        --step "${STEP:-30s}" ${REPORT_FLAGS:-} 2>&1); then
    say "summary stored"
else
    say "no summary stored: $out"
fi
exit 0
