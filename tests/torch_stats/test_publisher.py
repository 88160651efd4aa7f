"""The in-process publisher (gpu_exporter_torch) against the fake torch."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType

import pytest

import gpu_exporter_torch as publisher
from gpu_exporter_torch import Publisher, read_self_stat, sample

MIB = 1 << 20
#: The repository root: subprocesses import the publisher from the source tree, installed or not
#: (the GPU machine runs these tests from an unpacked archive).
ROOT = Path(__file__).resolve().parents[2]


def _only_file(directory: Path) -> Path:
    files = sorted(directory.iterdir())
    assert len(files) == 1, files
    return files[0]


def test_import_loads_only_the_standard_library(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        before = set(sys.modules)
        import gpu_exporter_torch
        new = sorted(m for m in set(sys.modules) - before if m != "gpu_exporter_torch")
        print([m for m in new if m.split(".")[0] not in sys.stdlib_module_names])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_nothing_is_published_without_torch(
    shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert Publisher(str(shared_dir)).publish_once() is False
    assert list(shared_dir.iterdir()) == []


def test_cuda_is_never_initialised_by_the_publisher(
    torch: ModuleType, shared_dir: Path
) -> None:
    assert Publisher(str(shared_dir)).publish_once() is False
    assert sample(torch) == []
    assert torch.cuda.stats_calls == 0  # not even asked before is_initialized()
    assert torch.cuda.init_pid is None
    assert list(shared_dir.iterdir()) == []


def test_file_holds_the_allocator_figures_of_used_devices(
    torch: ModuleType, shared_dir: Path
) -> None:
    torch.cuda.allocate(1, 300 * MIB)
    torch.cuda.allocate(1, 5 * MIB)
    torch.cuda.free(1, 5 * MIB)
    with pytest.raises(torch.OutOfMemoryError):
        torch.cuda.allocate(1, 10**15)

    assert Publisher(str(shared_dir), clock=lambda: 1234.5).publish_once() is True
    path = _only_file(shared_dir)
    pid, start_ticks = read_self_stat()
    namespace = os.stat("/proc/self/ns/pid").st_ino
    assert path.name == f"{pid}-{start_ticks}-{namespace}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    document = json.loads(path.read_text())
    assert document["format"] == 1
    assert (document["pid"], document["start_ticks"]) == (os.getpid(), start_ticks)
    assert document["pid_namespace"] == namespace
    assert document["uid"] == os.getuid()
    assert document["time"] == 1234.5
    assert document["torch_version"] == "2.11.0+fake"
    # Device 0 was never used: left out (asking for its properties could create a context).
    stats = torch.cuda.devices[1].stats
    assert document["devices"] == [
        {
            "index": 1,
            "uuid": "GPU-" + torch.cuda.uuids[1],
            "allocated_bytes": 300 * MIB,
            "reserved_bytes": stats["reserved_bytes.all.current"],
            "active_bytes": 300 * MIB,
            "inactive_split_bytes": 0,
            "peak_allocated_bytes": 305 * MIB,
            "alloc_retries": 1,
            "ooms": 1,
        }
    ]
    assert stats["reserved_bytes.all.current"] == 306 * MIB  # 2 MiB segments


def test_rewrites_leave_no_temporary_files_and_never_follow_planted_links(
    torch: ModuleType, shared_dir: Path, tmp_path: Path
) -> None:
    torch.cuda.allocate(0, MIB)
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    pid, start_ticks = read_self_stat()
    namespace = os.stat("/proc/self/ns/pid").st_ino
    name = f"{pid}-{start_ticks}-{namespace}.json"
    (shared_dir / f".{name}.{pid}.tmp").symlink_to(victim)

    writer = Publisher(str(shared_dir))
    for _ in range(3):
        assert writer.publish_once() is True
    assert victim.read_text() == "untouched"
    assert [p.name for p in shared_dir.iterdir()] == [name]


def test_errors_are_swallowed_after_one_warning(torch: ModuleType, tmp_path: Path) -> None:
    torch.cuda.allocate(0, MIB)
    warnings: list[str] = []
    writer = Publisher(str(tmp_path / "missing"), warn=warnings.append)
    assert [writer.publish_once(), writer.publish_once()] == [False, False]
    torch.cuda.fail_with = RuntimeError("allocator busted")
    assert writer.publish_once() is False
    assert writer.errors == 3
    assert len(warnings) == 1
    assert "missing" in warnings[0]
    assert "further errors are not reported" in warnings[0]


def test_thread_publishes_periodically_and_stop_writes_the_last_figures(
    torch: ModuleType, shared_dir: Path
) -> None:
    torch.cuda.allocate(0, MIB)
    writer = Publisher(str(shared_dir), interval=0.5)
    writer.start()
    deadline = time.monotonic() + 10
    while writer.writes < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    torch.cuda.allocate(0, 7 * MIB)
    writer.stop()
    assert writer.writes >= 3
    document = json.loads(_only_file(shared_dir).read_text())
    assert document["devices"][0]["allocated_bytes"] == 8 * MIB


def test_interval_has_a_floor() -> None:
    assert Publisher("/nonexistent", interval=0.001).interval == publisher.MIN_INTERVAL


def _run(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*args, sys.executable, "-c", textwrap.dedent(code)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )


def _env(fake_torch_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_TORCH")}
    env["PYTHONPATH"] = os.pathsep.join([str(fake_torch_path), str(ROOT)])
    env.update(extra)
    return env


def test_start_writes_the_final_figures_at_exit(fake_torch_path: Path, shared_dir: Path) -> None:
    code = f"""
        import torch, gpu_exporter_torch
        gpu_exporter_torch.start({str(shared_dir)!r}, interval=3600)
        torch.cuda.allocate(0, 64 << 20)
        assert gpu_exporter_torch.start() is gpu_exporter_torch.start()  # idempotent
    """
    done = _run(code, _env(fake_torch_path))
    assert done.returncode == 0, done.stderr
    document = json.loads(_only_file(shared_dir).read_text())
    assert document["devices"][0]["allocated_bytes"] == 64 << 20


def test_start_reads_its_settings_from_the_environment(
    fake_torch_path: Path, shared_dir: Path
) -> None:
    code = """
        import torch, gpu_exporter_torch
        torch.cuda.allocate(0, 1 << 20)
        p = gpu_exporter_torch.start()
        print(p.directory, p.interval)
    """
    env = _env(fake_torch_path, GPU_EXPORTER_TORCH_DIR=str(shared_dir),
               GPU_EXPORTER_TORCH_INTERVAL="2.5")
    done = _run(code, env)
    assert done.stdout.split() == [str(shared_dir), "2.5"]
    assert len(list(shared_dir.iterdir())) == 1
    bad = _run(code.replace("print(p.directory, p.interval)", "print(p)"),
               _env(fake_torch_path, GPU_EXPORTER_TORCH_INTERVAL="soon"))
    assert bad.returncode == 0  # the program runs on without the publisher
    assert bad.stdout.strip() == "None"
    assert "gpu_exporter_torch: not started" in bad.stderr


def test_forked_children_of_a_cuda_process_publish_nothing(
    fake_torch_path: Path, shared_dir: Path
) -> None:
    code = f"""
        import os, sys, time, torch, gpu_exporter_torch
        torch.cuda.allocate(0, 3 << 20)
        gpu_exporter_torch.start({str(shared_dir)!r}, interval=0.5)
        child = os.fork()
        if child == 0:
            time.sleep(1.2)   # the child's own publisher thread ticks twice
            sys.exit(0)       # runs the inherited atexit handlers
        os.waitpid(child, 0)
        print(child)
    """
    done = _run(code, _env(fake_torch_path))
    assert done.returncode == 0, done.stderr
    child = int(done.stdout)
    names = [p.name for p in shared_dir.iterdir()]
    assert len(names) == 1
    assert not names[0].startswith(f"{child}-")


def test_launcher_enables_publishing_without_code_changes(
    fake_torch_path: Path, shared_dir: Path, tmp_path: Path
) -> None:
    # A sitecustomize of the user's is shadowed by the hook's, and must still run.
    user_site = tmp_path / "user-site"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text(
        f"open({str(tmp_path / 'marker')!r}, 'w').write('ran')\n"
    )
    env = _env(fake_torch_path)
    env["PYTHONPATH"] += os.pathsep + str(user_site)
    code = "import torch; torch.cuda.allocate(0, 5 << 20)"
    done = _run(code, env, sys.executable, "-m", "gpu_exporter_torch.run",
                "--dir", str(shared_dir), "--interval", "1", "--")
    assert done.returncode == 0, done.stderr
    document = json.loads(_only_file(shared_dir).read_text())
    assert document["interval_seconds"] == 1.0
    assert document["devices"][0]["allocated_bytes"] == 5 << 20
    assert (tmp_path / "marker").read_text() == "ran"


def test_launcher_passes_the_exit_status_and_rejects_bad_input(
    fake_torch_path: Path, shared_dir: Path
) -> None:
    launcher = [sys.executable, "-m", "gpu_exporter_torch.run"]
    env = _env(fake_torch_path)
    assert _run("import sys; sys.exit(3)", env, *launcher).returncode == 3
    no_command = subprocess.run(launcher, env=env, capture_output=True, text=True, check=False)
    assert no_command.returncode == 2
    assert "no command given" in no_command.stderr
    bad_interval = subprocess.run([*launcher, "--interval", "0", "true"], env=env,
                                  capture_output=True, text=True, check=False)
    assert bad_interval.returncode == 2
    assert "at least 0.5" in bad_interval.stderr
    missing = subprocess.run([*launcher, "/nonexistent/program"], env=env,
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 127
    assert "cannot run" in missing.stderr


def test_hook_does_nothing_unless_enabled(fake_torch_path: Path, shared_dir: Path) -> None:
    env = _env(fake_torch_path, GPU_EXPORTER_TORCH_DIR=str(shared_dir))
    env["PYTHONPATH"] = os.pathsep.join([publisher.hook_dir(), env["PYTHONPATH"]])
    code = ("import sys, torch; torch.cuda.allocate(0, 1); "
            "print('gpu_exporter_torch' in sys.modules)")
    off = _run(code, env)
    assert off.stdout.strip() == "False"
    assert list(shared_dir.iterdir()) == []
    env["GPU_EXPORTER_TORCH"] = "1"
    on = _run(code, env)
    assert on.stdout.strip() == "True", on.stderr
    assert len(list(shared_dir.iterdir())) == 1


def test_real_cpu_torch_publishes_nothing_and_stays_uninitialised(shared_dir: Path) -> None:
    """With the real torch (CPU wheel, where installed): the API calls used exist and CUDA is
    not initialised by sampling."""
    code = f"""
        import torch, gpu_exporter_torch
        writer = gpu_exporter_torch.Publisher({str(shared_dir)!r})
        print(writer.publish_once(), gpu_exporter_torch.sample(torch),
              torch.cuda.is_initialized(), writer.errors)
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    check = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, env=env,
                           check=False)
    if check.returncode != 0:
        pytest.skip("torch is not installed here")
    done = _run(code, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "[]", "False", "0"]
    assert list(shared_dir.iterdir()) == []
