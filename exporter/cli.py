"""``gpu-exporter`` / ``python -m exporter``: flags -> source, enrichers, scheduler, app, uvicorn.

Exit status: 0 after SIGTERM or SIGINT (at any time, start-up included; within
``exporter.signals.STOP_DEADLINE_SECONDS``), 2 for bad flags, environment variables, files or
scenarios and for a listen address that cannot be resolved or bound (the last stderr line says
what is wrong), 1 when the installed uvicorn is not one the server supports.
Problems after start-up (NVML down, a hung GPU, a file that became unreadable) never exit: they
are logged and served as metrics. SIGHUP re-reads the web config and the passwd file.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from exporter import __version__
from exporter.attribution.accounting import IdleAccounting
from exporter.attribution.enrich import Enricher, ProcessEnricher, chain
from exporter.attribution.owners import OwnerResolver, ProcfsError, check_procfs
from exporter.attribution.passwd import PasswdFileError, check_passwd_file
from exporter.attribution.passwd import request_reload as request_passwd_reload
from exporter.attribution.torchtotals import TorchUserTotals
from exporter.catalogue.metrics import Group
from exporter.catalogue.workloads import KUBERNETES, SLURM
from exporter.config import Config, ConfigError, build_parser, resolve, unknown_env
from exporter.logs import setup_logging
from exporter.memory import release_free_heap, tune_malloc
from exporter.scheduler import Scheduler
from exporter.signals import Stopping, StopRequest, install_stop_handler
from exporter.sources.base import Source
from exporter.sources.simulated import list_presets
from exporter.values import ListenAddress
from exporter.web.app import create_app
from exporter.web.protocol import check_uvicorn
from exporter.web.server import ServerLimits, build_server
from exporter.web.watcher import WebConfigWatcher
from exporter.web.webconfig import WebConfigError

if TYPE_CHECKING:  # imported by build_poller only with --kubernetes
    from exporter.attribution.podresources.client import PodResourcesPoller

__all__ = ["build_accounting", "build_enricher", "build_poller", "build_source", "main",
           "parse_config"]

log = logging.getLogger("exporter")

#: Seconds uvicorn waits for open requests at shutdown (a hung collection must not stall it);
#: well inside ``exporter.signals.STOP_DEADLINE_SECONDS``.
SHUTDOWN_GRACE_SECONDS = 3
#: Kind counted in ``gpu_exporter_errors_total`` when the web config fails to reload.
WEB_CONFIG_ERROR = "web_config"


def _presets() -> list[str]:
    try:
        return list_presets()
    except Exception:  # a broken install must not break --help
        return []


def _scenario_help() -> str:
    presets = ", ".join(_presets()) or "none installed"
    return f"Scenario presets for --source simulated: {presets}; or synthetic:<gpus>x<processes>."


def parse_config(argv: Sequence[str] | None, environ: Mapping[str, str]) -> Config:
    """Parse flags and environment into a ``Config``.

    Raises:
        SystemExit: argparse handled --help/--version (0) or a malformed command line (2).
        ConfigError: a value is unusable.
    """
    parser = build_parser(_scenario_help())
    namespace = parser.parse_args(argv)
    return resolve(namespace, environ)


def check_files(config: Config) -> None:
    """Check the passwd file and procfs named by the flags.

    Raises:
        ConfigError: either is unusable (the message says how to fix it).
    """
    try:
        check_passwd_file(config.passwd_file)
    except PasswdFileError as exc:
        raise ConfigError(f"--passwd-file: {exc}") from None
    try:
        check_procfs(config.procfs)
    except ProcfsError as exc:
        raise ConfigError(f"--procfs: {exc}") from None


def build_source(config: Config) -> Source:
    """The source named by ``--source`` (the scenario is loaded and validated here).

    Raises:
        ConfigError: the scenario is unknown or invalid.
    """
    if config.source == "nvml":
        from exporter.sources.nvml.source import NvmlSource  # noqa: PLC0415 (pynvml loads lazily)

        # Half the collection timeout: a hung GPU is answered down while scrapes still wait.
        return NvmlSource(hostname=config.hostname, gpu_timeout=config.timeout / 2,
                          watch_events=Group.XID in config.groups)
    from exporter.sources.simulated.scenario import ScenarioError, load_scenario  # noqa: PLC0415
    from exporter.sources.simulated.source import SimulatedSource  # noqa: PLC0415

    assert config.scenario is not None  # resolve() checked it
    try:
        scenario = load_scenario(config.scenario, seed=config.simulate_seed)
    except ScenarioError as exc:
        raise ConfigError(f"--scenario: {exc}") from None
    return SimulatedSource(
        scenario, seed=config.simulate_seed, speed=config.simulate_speed, hostname=config.hostname
    )


def build_poller(config: Config) -> PodResourcesPoller | None:
    """The kubelet allocation poller (not started), with ``--kubernetes`` on the NVML source
    and a socket path; None otherwise (the simulated source simulates allocations)."""
    if (config.source == "simulated" or not config.workload_labels.on(KUBERNETES)
            or not config.pod_resources_socket):
        return None
    from exporter.attribution.podresources.client import (  # noqa: PLC0415 (only when on)
        PodResourcesClient,
        PodResourcesPoller,
    )

    client = PodResourcesClient(
        config.pod_resources_socket, max_message_bytes=config.pod_resources_max_bytes,
        extra_resource_names=config.gpu_resources,
    )
    return PodResourcesPoller(client, interval_seconds=config.pod_resources_interval)


def build_accounting(config: Config) -> IdleAccounting | None:
    """Idle accounting, run after attribution, when processes are collected (rows kept apart
    by the workload labels the exposition shows)."""
    if not {Group.PROCESSES, Group.PROCESS_UTILIZATION} & config.groups:
        return None
    return IdleAccounting(config.workload_labels)


def build_enricher(config: Config, poller: PodResourcesPoller | None = None) -> Enricher | None:
    """Owner, cgroup (the kinds switched on) and allocation (kubelet, Slurm) enrichment, then the
    PyTorch allocator figures and their per-user counters (``--collector.torch``). The
    simulated source gets the per-user counters only (None when torch is off)."""
    if config.source == "simulated":  # its processes carry owners and workloads; /proc is unrelated
        return TorchUserTotals() if Group.TORCH in config.groups else None
    workloads = config.workload_labels
    owners = OwnerResolver(
        procfs=config.procfs, passwd_file=config.passwd_file,
        include_cmdline=config.cmdline, cgroups=bool(workloads.kinds),
    )
    enricher: Enricher = ProcessEnricher(owners, workloads.kinds, workloads.resolvers(config),
                                         allocations=poller)
    if workloads.on(SLURM) and config.slurm_allocation_dir:
        from exporter.attribution.slurm_allocations import reading  # noqa: PLC0415 (when on)

        enricher = chain(enricher, reading(config.slurm_allocation_dir, owners.user_name))
    if Group.TORCH not in config.groups:
        return enricher
    from exporter.attribution.torchstats import (  # noqa: PLC0415 (only when on)
        TorchEnricher,
        TorchStatsReader,
    )

    reader = TorchStatsReader(config.torch_dir, procfs=config.procfs,
                              max_age=config.torch_max_age, max_files=config.torch_max_files)
    return chain(enricher, TorchEnricher(reader), TorchUserTotals())


#: errno values meaning "no IPv6 here" (kernel without it, or disabled in this namespace).
_NO_IPV6 = (errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT, errno.EADDRNOTAVAIL)


def _listen(family: int, kind: int, proto: int, target: tuple[object, ...],
            dual_stack: bool = False) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    try:
        if dual_stack:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(target)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def bind(address: ListenAddress) -> socket.socket:
    """A bound listening socket; ``:port`` means every interface (IPv6 and IPv4 if possible).

    Raises:
        OSError: the address cannot be resolved or bound (in use, not local, no permission).
    """
    if address.host is not None:
        family, kind, proto, _, target = socket.getaddrinfo(
            address.host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        return _listen(family, kind, proto, target)
    try:
        return _listen(socket.AF_INET6, socket.SOCK_STREAM, 0, ("::", address.port),
                       dual_stack=True)
    except OSError as exc:
        if exc.errno not in _NO_IPV6:
            raise
    # IPv6 is unavailable (common in containers): every IPv4 interface.
    return _listen(socket.AF_INET, socket.SOCK_STREAM, 0, ("0.0.0.0", address.port))


def serve(config: Config, scheduler: Scheduler, sock: socket.socket,
          watcher: WebConfigWatcher) -> bool:
    """Run uvicorn on ``sock`` until SIGTERM/SIGINT; False if the server never started."""
    app = create_app(config, scheduler)
    limits = ServerLimits(
        max_connections=config.max_connections,
        read_header_timeout=config.read_header_timeout,
        idle_timeout=config.idle_timeout,
        max_requests=config.max_requests,
        max_other_requests=config.max_other_requests,
        graceful_shutdown_seconds=SHUTDOWN_GRACE_SECONDS,
    )
    server, guarded, _ = build_server(
        app, sock, watcher=watcher, limits=limits, metrics_path=config.telemetry_path,
        access_log=config.access_log,
    )
    # uvicorn installs its own handlers while it runs and re-raises the signal afterwards; ours
    # (exporter.signals) then only records it, so SIGTERM ends with exit status 0.
    StopRequest.server = server
    StopRequest.starting = False
    try:
        if StopRequest.requested:  # stopped while starting: nothing to serve
            return True
        server.run(sockets=[guarded])
        return server.started
    finally:
        StopRequest.server = None
        guarded.close()


def _fail(message: str) -> int:
    print(f"gpu-exporter: error: {message}", file=sys.stderr)
    return 2


def _hang_up_handler(config: Config, watcher: WebConfigWatcher,
                     scheduler: Scheduler) -> Callable[[], None]:
    """SIGHUP: re-read the web config and the passwd file, on the event loop once it runs
    (the watcher lives there; a signal handler may interrupt it anywhere)."""
    passwd = config.source == "nvml"  # the simulated source reads no passwd file

    def reload() -> None:
        watcher.request_reload()
        reloaded = watcher.maybe_reload()
        if passwd:
            request_passwd_reload()
            scheduler.trigger()  # a collection re-reads it now, in the collector thread
        web = ("no web config file" if watcher.current.path is None
               else "web config reloaded" if reloaded
               else "web config kept (see the error above)")
        log.info("SIGHUP: %s%s", web, "; passwd file re-read" if passwd else "")

    def on_signal() -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving yet or any more: the next check reloads
            watcher.request_reload()
            request_passwd_reload()
            return
        loop.call_soon_threadsafe(reload)

    return on_signal


def main(argv: Sequence[str] | None = None) -> int:
    """Run the exporter; returns the exit status (see the module docstring)."""
    # --- subcommand: `gpu-exporter report ...` (its own flags; the exporter never starts) ---
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["report"]:
        from exporter.report.main import main as report_main  # noqa: PLC0415

        return report_main(args[1:])
    # --- the exporter ---
    install_stop_handler()
    try:
        return _run(argv)
    except Stopping:  # SIGTERM/SIGINT while starting (exporter.signals)
        log.info("gpu-exporter stopped while starting")
        return 0
    finally:
        StopRequest.reload = None


def _run(argv: Sequence[str] | None) -> int:
    try:
        config = parse_config(argv, os.environ)
    except SystemExit as exc:  # argparse: --help, --version, malformed command line
        return exc.code if isinstance(exc.code, int) else 2
    except ConfigError as exc:
        return _fail(str(exc))
    try:
        check_files(config)
        watcher = WebConfigWatcher(config.web_config_file)
        source = build_source(config)
    except ConfigError as exc:
        return _fail(str(exc))
    except WebConfigError as exc:
        return _fail(f"--web.config.file: {exc}")
    setup_logging(config.log_level, config.log_format)
    tune_malloc(os.environ)  # before any thread starts
    for warning in watcher.current.warnings:  # settings that weaken security
        log.warning("--web.config.file: %s", warning)
    if watcher.current.differences:  # what Python's TLS cannot do as Go's does
        log.warning("--web.config.file is served differently from Go exporters (see "
                    "docs/security.md, compatibility): %s", "; ".join(watcher.current.differences))
    for name in unknown_env(os.environ):
        log.warning("environment variable %s matches no flag; ignored", name)
    if config.workload_labels.on(KUBERNETES) and config.source == "nvml":
        for flag, path in (("--kubernetes.pod-logs-dir", config.pod_logs_dir),
                           ("--kubernetes.container-logs-dir", config.container_logs_dir)):
            if not os.path.isdir(path):  # a missing mount: pods stay unresolved, not fatal
                log.warning("%s %s is not a directory; mount the host's directory there or "
                            "processes get no pod labels", flag, path)
    if Group.TORCH in config.groups and config.source == "nvml":
        from exporter.attribution.torchfile import ensure_directory  # noqa: PLC0415

        for warning in ensure_directory(config.torch_dir):  # not fatal: no allocator series
            log.warning("--torch.dir: %s", warning)
    try:
        check_uvicorn()
    except RuntimeError as exc:  # an install problem, not a usage error
        print(f"gpu-exporter: error: {exc}", file=sys.stderr)
        return 1
    try:
        sock = bind(config.listen_address)
    except OSError as exc:  # in use, not local, unresolvable, no permission
        return _fail(f"--web.listen-address: cannot listen on {config.listen_address}: "
                     f"{exc.strerror or exc}")
    try:
        return _serve_socket(config, source, watcher, sock)
    finally:
        sock.close()


def _serve_socket(config: Config, source: Source, watcher: WebConfigWatcher,
                  sock: socket.socket) -> int:
    poller = build_poller(config)
    steps = [step for step in (build_enricher(config, poller), build_accounting(config))
             if step is not None]
    scheduler = Scheduler(
        source,
        chain(*steps) if steps else None,
        groups=config.collect_groups(),
        min_interval=config.min_interval,
        timeout=config.timeout,
        stale_after=config.stale_after,
        on_first_snapshot=release_free_heap,  # start-up's freed heap back to the kernel
    )
    if watcher.current.path is not None:
        scheduler.record_web_config_reload(True)

        def reloaded(successful: bool) -> None:
            scheduler.record_web_config_reload(successful)
            if not successful:
                scheduler.count_errors({WEB_CONFIG_ERROR: 1})

        watcher.on_reload = reloaded
    StopRequest.reload = _hang_up_handler(config, watcher, scheduler)
    host, port = sock.getsockname()[:2]
    web = watcher.current
    log.info(
        "gpu-exporter %s listening on %s (port %d), source %s, metrics at %s, %s%s",
        __version__, config.listen_address, port, config.source, config.telemetry_path,
        "TLS" if web.tls else "plain HTTP", ", basic auth" if web.users else "",
        extra={"address": f"{host}:{port}"},
    )
    if poller is not None:
        poller.start()  # background thread: scrapes only read its latest answer
    scheduler.trigger()  # initialise the source now, not on the first scrape
    try:
        started = serve(config, scheduler, sock, watcher)
    finally:
        scheduler.close()
        if poller is not None:
            poller.stop()
    if not started:
        log.error("the HTTP server failed to start")
        return 1
    log.info("gpu-exporter stopped")
    return 0
