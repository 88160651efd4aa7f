#!/bin/sh
# Slurm node Epilog: remove the allocation files slurm/prolog.sh wrote for this job.
#
# Only files that name this job are removed (their first field is its id), so a file another
# job's prolog wrote meanwhile stays. slurm.conf: Epilog=/path/to/epilog.sh.
# GPU_EXPORTER_ALLOCATION_DIR overrides the directory (default /run/gpustat). Always exits 0.
dir=${GPU_EXPORTER_ALLOCATION_DIR:-/run/gpustat}
job=${SLURM_JOB_ID:-}
case "$job" in ''|*[!0-9]*) exit 0 ;; esac
[ -d "$dir" ] || exit 0
for file in "$dir"/*; do
    [ -f "$file" ] && [ ! -L "$file" ] || continue
    read -r holder _ < "$file" 2>/dev/null || continue
    [ "$holder" = "$job" ] && rm -f "$file"
done
exit 0
