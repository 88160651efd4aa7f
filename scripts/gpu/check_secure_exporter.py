"""The exporter on real GPUs behind TLS and basic auth, and where command lines appear.

    python3 scripts/gpu/check_secure_exporter.py [--json OUT.json]

Makes a throwaway certificate (openssl CLI) and a bcrypt hash (the ``bcrypt`` wheel), starts a
torch process whose command line carries a marker (scripts/gpu/cuda_load.py copied under a
marked name), then runs ``python3 -m exporter --source nvml --web.config.file ...`` on
127.0.0.1 twice: without and with ``--process.cmdline``. Checks: 401 without credentials,
200 with them and real GPU series (gpu_up 1, the torch process's memory), plain HTTP refused,
HEAD answered, the marker in no response without --process.cmdline and only in
/api/v1/snapshot with it, SIGTERM exits 0. Prints PASS/FAIL lines and "N/N PASS"; exit 1 on
any FAIL; writes $OUT/secure_exporter.json (or --json) with the results.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.gpu.results import RESULTS, check  # noqa: E402
from tests.processes import LoggedServer  # noqa: E402

MARKER = "cmdlineMARKERx9q"
PASSWORD = "gpu-check-password"


def request(url: str, context: ssl.SSLContext | None, auth: bool,
            method: str = "GET") -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method)
    if auth:
        token = base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=15, context=context) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def start_exporter(args: list[str]) -> LoggedServer:
    return LoggedServer(
        [sys.executable, "-m", "exporter", "--web.listen-address", "127.0.0.1:0", *args],
        cwd=ROOT, env=os.environ)


def wait_ready(base: str, context: ssl.SSLContext, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if request(base + "/readyz", context, auth=True)[0] == 200:
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def run_one(work: Path, web: Path, context: ssl.SSLContext, cmdline: bool, pid: int) -> None:
    tag = "cmdline on" if cmdline else "cmdline off"
    args = ["--source", "nvml", "--web.config.file", str(web)]
    if cmdline:
        args.append("--process.cmdline")
    exporter = start_exporter(args)
    try:
        if not check(f"[{tag}] exporter starts", exporter.port_seen.wait(60),
                     "\n".join(exporter.lines[-5:])):
            return
        base = f"https://127.0.0.1:{exporter.port}"
        check(f"[{tag}] ready over TLS with basic auth", wait_ready(base, context))
        code, _ = request(base + "/metrics", context, auth=False)
        check(f"[{tag}] no credentials: 401", code == 401, f"got {code}")
        code, body = request(base + "/metrics", context, auth=True)
        text = body.decode(errors="replace")
        check(f"[{tag}] credentials: 200 with GPU series", code == 200 and "gpu_up" in text,
              f"got {code}, {len(body)} bytes")
        up = re.findall(r"^gpu_up\{[^}]*\} (\S+)$", text, re.MULTILINE)
        check(f"[{tag}] gpu_up 1 on every GPU", bool(up) and all(v in {"1.0", "1"}
                                                                for v in up), f"{up}")
        check(f"[{tag}] the torch process is listed", f'pid="{pid}"' in text, f"pid {pid}")
        code, body = request(base + "/metrics", context, auth=True, method="HEAD")
        check(f"[{tag}] HEAD answered like GET", code == 200 and body == b"", f"got {code}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=5)
            plain_refused = False
        except (OSError, urllib.error.URLError):
            plain_refused = True
        check(f"[{tag}] plain HTTP refused", plain_refused)
        where = []
        for path in ("/metrics", "/", "/api/v1/snapshot"):
            _, body = request(base + path, context, auth=True)
            if MARKER.encode() in body:
                where.append(path)
        expected = ["/api/v1/snapshot"] if cmdline else []
        check(f"[{tag}] command line appears only in {expected or 'nothing'}", where == expected,
              f"found in {where}")
    finally:
        code = exporter.stop(timeout=15)
        check(f"[{tag}] SIGTERM exits 0", code == 0, f"exit {code}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    out = args.json or (os.path.join(os.environ["OUT"], "secure_exporter.json")
                        if os.environ.get("OUT") else None)
    try:
        import bcrypt  # noqa: PLC0415
    except ImportError:
        check("bcrypt importable", False, "install the bcrypt wheel")
        return 1
    if not shutil.which("openssl"):
        check("openssl CLI present", False)
        return 1
    work = Path(tempfile.mkdtemp(prefix="gpu-secure-"))
    load = None
    try:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "1", "-keyout", str(work / "tls.key"), "-out",
             str(work / "tls.crt"), "-subj", "/CN=127.0.0.1", "-addext",
             "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
        web = work / "web.yml"
        web.write_text(f"tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
                       f"basic_auth_users:\n  prometheus: '{hashed}'\n", encoding="utf-8")
        context = ssl.create_default_context(cafile=str(work / "tls.crt"))
        marked = work / f"cuda_load_{MARKER}.py"
        shutil.copy(ROOT / "scripts/gpu/cuda_load.py", marked)
        load = subprocess.Popen([sys.executable, str(marked), "--gpu", "0", "--gib", "1",
                                 "--seconds", "180"], stdout=subprocess.PIPE, text=True)
        assert load.stdout is not None
        line = load.stdout.readline().strip()
        if not check("torch process holds 1 GiB on GPU 0", line.startswith("ready"), line):
            return 1
        pid = int(line.split()[1])
        for cmdline in (False, True):
            run_one(work, web, context, cmdline, pid)
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    passed = sum(ok for _, ok, _ in RESULTS)
    print(f"{passed}/{len(RESULTS)} PASS", flush=True)
    if out:
        Path(out).write_text(json.dumps([{"check": n, "ok": ok, "detail": d}
                                         for n, ok, d in RESULTS], indent=2), encoding="utf-8")
    return 0 if passed == len(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
