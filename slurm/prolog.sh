#!/bin/sh
# Slurm node Prolog: record which job holds each GPU, for gpu-exporter (--slurm) and Jobstats.
#
# Writes <dir>/<index> and, where nvidia-smi names it, <dir>/GPU-<uuid> (MIG devices:
# <dir>/MIG-<uuid>), each holding "<job id> <uid>": the convention of Princeton's Jobstats.
# The exporter reads them (--slurm.allocation-dir, default /run/gpustat) and serves
# gpu_allocation_info{slurm_job, user, uid} per GPU, so a job that holds a GPU and runs nothing
# on it shows (GpuAllocatedIdle). slurm/epilog.sh removes them.
#
# slurm.conf: Prolog=/path/to/prolog.sh and PrologFlags=Alloc (run at allocation, not at the
# first step, so salloc sessions are seen too). Environment: GPU_EXPORTER_ALLOCATION_DIR
# overrides the directory. A prolog that fails drains the node, so this one always exits 0
# and reports problems to syslog.
dir=${GPU_EXPORTER_ALLOCATION_DIR:-/run/gpustat}
job=${SLURM_JOB_ID:-}
uid=${SLURM_JOB_UID:-}
gpus=${SLURM_JOB_GPUS:-${GPU_DEVICE_ORDINAL:-${CUDA_VISIBLE_DEVICES:-}}}

say() { logger -t gpu-exporter-prolog "job ${job}: $*" 2>/dev/null || echo "$*" >&2; }

case "$job" in ''|*[!0-9]*) exit 0 ;; esac
case "$uid" in *[!0-9]*) uid= ;; esac
[ -n "$gpus" ] || exit 0
if ! mkdir -p -m 0755 "$dir" 2>/dev/null; then
    say "cannot create $dir"
    exit 0
fi

# One file, written whole: a temporary name the exporter ignores (a leading dot), then renamed.
record() {
    tmp="$dir/.$1.$job.$$"
    if printf '%s\n' "$job${uid:+ $uid}" > "$tmp" && mv -f "$tmp" "$dir/$1"; then
        return 0
    fi
    rm -f "$tmp"
    say "cannot write $dir/$1"
}

smi=$(command -v nvidia-smi 2>/dev/null)
for device in $(printf '%s' "$gpus" | tr ',' ' '); do
    case "$device" in
        MIG-*|GPU-*) record "$device" ;;
        *[!0-9]*|'') say "unexpected GPU id '$device'" ;;
        *)
            record "$device"
            if [ -n "$smi" ]; then
                uuid=$("$smi" --query-gpu=uuid --format=csv,noheader -i "$device" 2>/dev/null)
                case "$uuid" in GPU-*) record "$uuid" ;; esac
            fi
            ;;
    esac
done
exit 0
