"""Authentication never fails open while the web config is rewritten in place: an editor's
truncate-then-write (in two parts) racing SIGHUPs and unauthenticated scrapes, against the
real process. Bounded: ``SECONDS`` of it, at most ``SCRAPES`` scrapes."""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path

import bcrypt
import httpx
import pytest

from tests.e2e.server import ExporterProcess

pytestmark = pytest.mark.slow
SIM = ("--source", "simulated", "--scenario", "shared-workstation")
SCRAPES = 3000
SECONDS = 3.0


def test_rewriting_the_web_config_under_sighup_never_lets_a_scrape_in(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
    text = (f"# scrapers\nbasic_auth_users:\n  prom: '{hashed}'\n"
            "unauthenticated_paths: [/healthz, /readyz]\n").encode()
    path = tmp_path / "web.yml"
    path.write_bytes(text)
    with ExporterProcess(*SIM, "--web.config.file", str(path)) as proc:
        stop = threading.Event()

        def edit() -> None:  # truncate, write a part, write the rest: an editor's save
            half = text.index(b"  prom")  # "basic_auth_users:" is valid YAML: no users
            while not stop.is_set():
                with path.open("wb") as handle:
                    handle.flush()
                    stop.wait(0.004)
                    handle.write(text[:half])
                    handle.flush()
                    stop.wait(0.004)
                    handle.write(text[half:])
                stop.wait(0.02)

        def hang_up() -> None:
            while not stop.wait(0.03):
                proc.proc.send_signal(signal.SIGHUP)

        threads = [threading.Thread(target=edit), threading.Thread(target=hang_up)]
        for thread in threads:
            thread.start()
        codes: dict[int, int] = {}
        deadline = time.monotonic() + SECONDS
        try:
            with httpx.Client(timeout=10) as client:
                while sum(codes.values()) < SCRAPES and time.monotonic() < deadline:
                    status = client.get(proc.url("/metrics")).status_code
                    codes[status] = codes.get(status, 0) + 1
        finally:
            stop.set()
            for thread in threads:
                thread.join(10)
        assert codes.get(200, 0) == 0, codes
        assert codes.get(401, 0) > 0, codes
        # The race was real: reloads saw the file empty or half-written, and refused it.
        assert any("web config not reloaded" in line for line in proc.lines), proc.log

        path.write_bytes(text)
        proc.proc.send_signal(signal.SIGHUP)  # the whole file: reloaded, and the gauge says so
        deadline = time.monotonic() + 10
        with httpx.Client(timeout=10, auth=("prom", "secret")) as client:
            while "\ngpu_exporter_web_config_last_reload_successful 1" not in (
                    body := client.get(proc.url("/metrics")).text):
                assert time.monotonic() < deadline, body
                time.sleep(0.02)
        failed = re.search(r'gpu_exporter_errors_total\{kind="web_config"\} (\d+)', body)
        assert failed is not None, body
        assert int(failed.group(1)) >= 2, body
        assert proc.stop() == 0
