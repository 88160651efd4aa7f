"""The shipped prolog and epilog without Slurm: the environment slurmd gives them, and an
``nvidia-smi`` stand-in that answers UUIDs as the real one does (``--query-gpu=uuid -i N``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from exporter.attribution.slurm_allocations import AllocationFiles

ROOT = Path(__file__).resolve().parents[2]
SMI = """#!/bin/sh
# nvidia-smi --query-gpu=uuid --format=csv,noheader -i N
for last; do :; done
printf 'GPU-0000000%s-aaaa-4bbb-8ccc-0000000000d%s\\n' "$last" "$last"
"""


def _run(script: str, directory: Path, tmp: Path, **env: str) -> None:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(SMI)
    smi.chmod(0o755)
    environment = {"PATH": f"{bin_dir}:/usr/bin:/bin", "GPU_EXPORTER_ALLOCATION_DIR":
                   str(directory), **env}
    subprocess.run(["/bin/sh", str(ROOT / "slurm" / script)], env=environment, check=True,
                   timeout=30, capture_output=True)


def test_the_prolog_writes_index_and_uuid_files_the_exporter_reads(tmp_path: Path) -> None:
    directory = tmp_path / "gpustat"
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="42", SLURM_JOB_UID="1001",
         SLURM_JOB_GPUS="0,3")
    assert {p.name: p.read_text() for p in directory.iterdir()} == {
        "0": "42 1001\n", "3": "42 1001\n",
        "GPU-00000000-aaaa-4bbb-8ccc-0000000000d0": "42 1001\n",
        "GPU-00000003-aaaa-4bbb-8ccc-0000000000d3": "42 1001\n"}
    assert oct(directory.stat().st_mode & 0o777) == "0o755"
    files = AllocationFiles(str(directory))
    assert len(files.read()) == 4
    assert files.take_errors() == 0
    # Another job on GPU 1, a MIG device given by its UUID; then job 42 ends.
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="43", SLURM_JOB_UID="1002",
         CUDA_VISIBLE_DEVICES="MIG-5c1e0f3a-8d2b-4c6e-a1f0-3b5d7e9c1a2f")
    _run("epilog.sh", directory, tmp_path, SLURM_JOB_ID="42")
    assert {p.name: p.read_text() for p in directory.iterdir()} == {
        "MIG-5c1e0f3a-8d2b-4c6e-a1f0-3b5d7e9c1a2f": "43 1002\n"}


def test_the_prolog_writes_nothing_for_odd_input_and_always_exits_0(tmp_path: Path) -> None:
    directory = tmp_path / "gpustat"
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="42; rm -rf /", SLURM_JOB_GPUS="0")
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="44")  # no GPUs
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="45", SLURM_JOB_UID="x",
         SLURM_JOB_GPUS="../etc,1")
    assert {p.name: p.read_text() for p in directory.iterdir()} == {
        "1": "45\n", "GPU-00000001-aaaa-4bbb-8ccc-0000000000d1": "45\n"}
    read = AllocationFiles(str(directory)).read()
    assert {(f.holder.job_id, f.holder.uid) for f in read} == {("45", "")}
    (tmp_path / "file").write_text("")
    _run("prolog.sh", tmp_path / "file" / "sub", tmp_path, SLURM_JOB_ID="46",
         SLURM_JOB_GPUS="0")  # cannot create the directory: still exit 0
    _run("epilog.sh", tmp_path / "missing", tmp_path, SLURM_JOB_ID="46")


def test_the_epilog_keeps_files_of_other_jobs_and_links(tmp_path: Path) -> None:
    directory = tmp_path / "gpustat"
    directory.mkdir()
    (directory / "0").write_text("7 0\n")
    (directory / "1").write_text("8 0\n")
    os.symlink(directory / "0", directory / "2")
    _run("epilog.sh", directory, tmp_path, SLURM_JOB_ID="7")
    assert sorted(p.name for p in directory.iterdir()) == ["1", "2"]
