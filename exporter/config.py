"""Flags and environment variables -> ``Config``.

Every flag is declared once in ``FLAGS`` (name, kind, default, help); argparse, the
``GPU_EXPORTER_<FLAG>`` environment variables and docs/flags.md's table are all built from it.
Precedence: command-line flag, then environment variable, then default.

Each flag's value is read by a parser of ``exporter.values``, and every number (a count, a
factor, a duration) must lie in its flag's range there (``RANGES``). Parsing raises
``ConfigError`` with one line that names the flag (or variable) and what is wrong, the range
included; ``exporter.cli`` turns it into exit status 2.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from exporter import __version__
from exporter.attribution.workloads import WorkloadLabels
from exporter.catalogue.defaults import (
    DEFAULT_DOCKER_ROOT,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PODMAN_STORAGE,
    DEFAULT_SOCKET,
)
from exporter.catalogue.gpustat import DEFAULT_DIRECTORY as DEFAULT_SLURM_ALLOCATION_DIR
from exporter.catalogue.metrics import OPT_IN_GROUPS, SWITCHABLE_GROUPS, Group
from exporter.catalogue.workloads import KINDS
from exporter.sources.simulated import list_presets  # not .scenario: YAML loads lazily
from exporter.state import ExpositionOptions
from exporter.values import (
    RANGES,
    ListenAddress,
    parse_bool,
    parse_choice,
    parse_duration,
    parse_float,
    parse_hostname,
    parse_int,
    parse_listen_address,
    parse_names,
    parse_optional_path,
    parse_path,
)

ENV_PREFIX = "GPU_EXPORTER_"
SOURCES: tuple[str, ...] = ("nvml", "simulated")
LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warn", "warning", "error")
LOG_FORMATS: tuple[str, ...] = ("logfmt", "json")
#: Paths the app serves itself; the telemetry path may not shadow them.
RESERVED_PATHS: frozenset[str] = frozenset(
    {"/", "/healthz", "/readyz", "/api/v1/snapshot", "/docs", "/redoc", "/openapi.json",
     "/docs/oauth2-redirect"}
)


class ConfigError(ValueError):
    """A flag, environment variable or file named on the command line is unusable."""


def _parse_telemetry_path(text: str) -> str:
    if not text.startswith("/") or any(c in text for c in "?# \t"):
        raise ValueError(f"{text!r} must be an absolute URL path such as /metrics")
    if text in RESERVED_PATHS:
        raise ValueError(f"{text!r} is already served by the exporter")
    return text


# --- the flag table ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Flag:
    """One command-line flag. ``dest`` is the ``Config`` field it fills."""

    name: str  # without the leading "--"
    dest: str
    help: str
    default: Any
    parse: Callable[[str], Any] | None = None  # None: boolean (--x / --no-x)
    metavar: str | None = None

    @property
    def is_bool(self) -> bool:
        return self.parse is None

    @property
    def env(self) -> str:
        return ENV_PREFIX + re.sub(r"[.\-]", "_", self.name).upper()

    @property
    def default_text(self) -> str:
        if self.is_bool:
            return "true" if self.default else "false"
        return "" if self.default is None else str(self.default)


#: Why an opt-in group is off by default (its flag's help).
_OPT_IN_NOTES = {
    **{group: " (opt-in: costs milliseconds per GPU)." for group in OPT_IN_GROUPS},
    Group.TORCH: " (opt-in: PyTorch allocator figures published by processes running "
    "gpu_exporter_torch into --torch.dir; see docs/pytorch-allocator.md).",
    Group.JOBSTATS: " (opt-in: also serve the nvidia_gpu_* series Jobstats' tools query, "
    "with jobid/userid from --slurm.allocation-dir; see docs/slurm.md).",
}


def _group_flags() -> list[Flag]:
    return [
        Flag(
            name=f"collector.{group.value}",
            dest=f"collector_{group.value}",
            help=f"Collect the {group.value} metrics" + _OPT_IN_NOTES.get(group, "."),
            default=group not in OPT_IN_GROUPS,
        )
        for group in SWITCHABLE_GROUPS
    ]


def _workload_flags() -> list[Flag]:
    """``--<kind>`` for every workload kind (``exporter.catalogue.workloads``), and the flag of
    each of its id labels."""
    return [flag for kind in KINDS for flag in (
        Flag(name=kind.name, dest=f"workload_{kind.name}", help=kind.help, default=False),
        *(Flag(name=label.flag, dest=f"id_label_{label.name}", help=label.help, default=False)
          for label in kind.id_labels))]


FLAGS: tuple[Flag, ...] = (
    Flag("web.listen-address", "listen_address", "Address to listen on: host:port, [ipv6]:port, "
         "or :port for every interface.", ":9477", parse_listen_address, "ADDR"),
    Flag("web.telemetry-path", "telemetry_path", "Path under which metrics are served.",
         "/metrics", _parse_telemetry_path, "PATH"),
    Flag("web.config.file", "web_config_file", "exporter-toolkit web config file: TLS, client "
         "certificates, basic auth, headers (docs/security.md). Re-read when it or a "
         "certificate changes.", None, parse_path, "FILE"),
    Flag("web.max-requests", "max_requests", "Most concurrent metric scrapes waiting for a "
         "collection; more get the last collected data at once (503 before the first "
         "collection; 0 = no limit).", 40,
         parse_int, "N"),
    Flag("web.max-other-requests", "max_other_requests", "Most concurrent requests to the JSON "
         "API, the page and the docs; more get 503 at once (0 = no limit).", 4, parse_int,
         "N"),
    Flag("web.max-connections", "max_connections", "Most open client connections; at the limit "
         "the one waiting longest without a request is closed to make room.", 1024,
         parse_int, "N"),
    Flag("web.read-header-timeout", "read_header_timeout", "Time a client has to send a "
         "request's headers (TLS handshake included) before its connection is closed.", "10s",
         parse_duration, "DURATION"),
    Flag("web.idle-timeout", "idle_timeout", "Idle keep-alive connections are closed after "
         "this long.", "60s", parse_duration, "DURATION"),
    Flag("web.api-docs", "api_docs", "Serve /docs, /redoc and /openapi.json (the first two load "
         "scripts from a CDN in the browser).", False),
    Flag("web.timeout-offset", "timeout_offset", "Subtracted from Prometheus' "
         "X-Prometheus-Scrape-Timeout-Seconds to bound the wait for a collection.", "500ms",
         parse_duration, "DURATION"),
    Flag("web.access-log", "access_log", "Log every HTTP request.", False),
    Flag("source", "source", "Where readings come from: nvml (the GPUs of this host) or "
         "simulated (a scenario; no GPU needed).", "nvml", parse_choice(SOURCES), "SOURCE"),
    Flag("scenario", "scenario", "Scenario for --source simulated: a preset name, "
         "synthetic:<gpus>x<processes>, or a YAML file path.", None, parse_path, "NAME|PATH"),
    Flag("simulate.seed", "simulate_seed", "Random seed of the simulated source.", 0,
         parse_int, "N"),
    Flag("simulate.speed", "simulate_speed", "Simulated seconds per real second.", 1.0,
         parse_float, "FACTOR"),
    Flag("hostname", "hostname", "Host name put on gpu_info (default: this machine's; on "
         "Kubernetes the chart sets the node name).", None, parse_hostname, "NAME"),
    Flag("passwd-file", "passwd_file", "passwd file used to turn uids into user names.",
         "/etc/passwd", parse_path, "FILE"),
    Flag("procfs", "procfs", "Mount point of the proc filesystem (the host's /proc in a "
         "container).", "/proc", parse_path, "DIR"),
    *_group_flags(),
    Flag("collector.min-interval", "min_interval", "Scrapes closer together than this share "
         "one collection.", "1s", parse_duration, "DURATION"),
    Flag("collector.timeout", "timeout", "Longest a scrape waits for a collection before the "
         "last good data is served as stale.", "5s", parse_duration, "DURATION"),
    Flag("collector.stale-after", "stale_after", "Data older than this makes /readyz fail.",
         "30s", parse_duration, "DURATION"),
    Flag("process.max-series-per-gpu", "max_series_per_gpu", "Most per-process series per GPU; "
         "the rest are folded into one overflow series.", 64, parse_int, "N"),
    Flag("process.pid-label", "pid_label", "Put the pid label on per-process series.", True),
    Flag("process.cmdline", "cmdline", "Read process command lines (may contain secrets; "
         "shown in the JSON API only).", False),
    *_workload_flags(),
    Flag("kubernetes.pod-logs-dir", "pod_logs_dir", "The kubelet's pod log directory "
         "(mounted from the host).", "/var/log/pods", parse_path, "DIR"),
    Flag("kubernetes.container-logs-dir", "container_logs_dir", "The kubelet's container log "
         "symlink directory (mounted from the host).", "/var/log/containers", parse_path, "DIR"),
    Flag("torch.dir", "torch_dir", "Directory where processes publish PyTorch allocator "
         "statistics (gpu_exporter_torch; group torch). Created with mode 1777 if missing.",
         "/run/gpu-exporter/torch", parse_path, "DIR"),
    Flag("torch.max-age", "torch_max_age", "Allocator statistics files not rewritten for this "
         "long are ignored (their process stopped publishing).", "60s", parse_duration,
         "DURATION"),
    Flag("torch.max-files", "torch_max_files", "Most entries of the torch directory looked "
         "at per collection.", 4096, parse_int, "N"),
    Flag("kubernetes.pod-resources-socket", "pod_resources_socket", "With --kubernetes: the "
         "kubelet's PodResources socket, polled in the background for GPU allocations "
         "(gpu_allocation_info); empty turns polling off.", DEFAULT_SOCKET,
         parse_optional_path, "PATH"),
    Flag("kubernetes.pod-resources-interval", "pod_resources_interval", "How often the kubelet "
         "is asked for allocations.", "5s", parse_duration, "DURATION"),
    Flag("kubernetes.pod-resources-max-bytes", "pod_resources_max_bytes", "Largest "
         "PodResources answer accepted, in bytes.", DEFAULT_MAX_MESSAGE_BYTES, parse_int, "N"),
    Flag("kubernetes.gpu-resource", "gpu_resources", "Extra device-plugin resource names "
         "counted as GPUs besides nvidia.com/gpu, nvidia.com/gpu.shared and nvidia.com/mig-* "
         "(comma-separated).", "", parse_names, "NAMES"),
    Flag("slurm.allocation-dir", "slurm_allocation_dir", "With --slurm: the directory where "
         "the Slurm prolog writes one file per GPU it gives a job (<index>, GPU-<uuid> or "
         "MIG-<uuid> holding \"<job id> <uid>\", Jobstats' convention), read for "
         "gpu_allocation_info; empty turns it off.", DEFAULT_SLURM_ALLOCATION_DIR,
         parse_optional_path, "DIR"),
    Flag("containers.docker-root", "docker_root", "Docker's data root, read for container "
         "names (containers/<id>/config.v2.json); empty: no Docker names.", DEFAULT_DOCKER_ROOT,
         parse_optional_path, "DIR"),
    Flag("containers.podman-storage", "podman_storage", "Podman's rootful storage root, read "
         "for container names; empty: no Podman names.", DEFAULT_PODMAN_STORAGE,
         parse_optional_path, "DIR"),
    Flag("log.level", "log_level", "Log level: debug, info, warn, error.", "info",
         parse_choice(LOG_LEVELS), "LEVEL"),
    Flag("log.format", "log_format", "Log format: logfmt or json.", "logfmt",
         parse_choice(LOG_FORMATS), "FORMAT"),
)


#: ``--help``'s sections, in order, as node_exporter groups its flags: (title, the flag names
#: or name prefixes ending in "." it holds). A flag belongs to the first section naming it;
#: ``--<kind>`` of every workload kind is an attribution flag.
FLAG_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Data source and simulation", ("source", "scenario", "simulate.", "hostname")),
    ("Web server", ("web.",)),
    ("Collectors", ("collector.",)),
    ("Processes and attribution (users, pods, jobs, containers)",
     ("passwd-file", "procfs", "process.", *(kind.name for kind in KINDS), "kubernetes.",
      "containers.", "slurm.")),
    ("Inside the processes (PyTorch allocator)", ("torch.",)),
    ("Logging", ("log.",)),
)
#: What a flag no section names falls under (a test keeps it empty).
OTHER_SECTION = "Other"
#: The subcommands, listed first in ``--help``: name and what it does.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("report", "who held GPUs idle over a time range, and what it cost, from a Prometheus "
     "running the accounting rules (gpu-exporter report --help)"),
)


def flag_section(flag: Flag) -> str:
    """The ``--help`` section of ``flag``."""
    for title, names in FLAG_SECTIONS:
        if any(flag.name == n or (n.endswith(".") and flag.name.startswith(n)) for n in names):
            return title
    return OTHER_SECTION


@dataclass(frozen=True, slots=True)
class Config:
    """The exporter's whole configuration (see ``FLAGS`` for what each field means)."""

    listen_address: ListenAddress = field(default_factory=lambda: ListenAddress(None, 9477))
    telemetry_path: str = "/metrics"
    web_config_file: str | None = None
    max_requests: int = 40
    max_other_requests: int = 4
    max_connections: int = 1024
    read_header_timeout: float = 10.0
    idle_timeout: float = 60.0
    api_docs: bool = False
    timeout_offset: float = 0.5
    access_log: bool = False
    source: str = "nvml"
    scenario: str | None = None
    simulate_seed: int = 0
    simulate_speed: float = 1.0
    hostname: str | None = None
    passwd_file: str = "/etc/passwd"
    procfs: str = "/proc"
    groups: frozenset[Group] = field(
        default_factory=lambda: frozenset(g for g in SWITCHABLE_GROUPS if g not in OPT_IN_GROUPS)
    )
    min_interval: float = 1.0
    timeout: float = 5.0
    stale_after: float = 30.0
    max_series_per_gpu: int = 64
    pid_label: bool = True
    cmdline: bool = False
    workload_labels: WorkloadLabels = field(default_factory=WorkloadLabels)  # kinds switched on
    pod_logs_dir: str = "/var/log/pods"
    container_logs_dir: str = "/var/log/containers"
    torch_dir: str = "/run/gpu-exporter/torch"
    torch_max_age: float = 60.0
    torch_max_files: int = 4096
    pod_resources_socket: str = DEFAULT_SOCKET
    pod_resources_interval: float = 5.0
    pod_resources_max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    gpu_resources: frozenset[str] = frozenset()
    slurm_allocation_dir: str = DEFAULT_SLURM_ALLOCATION_DIR
    docker_root: str = DEFAULT_DOCKER_ROOT
    podman_storage: str = DEFAULT_PODMAN_STORAGE
    log_level: str = "info"
    log_format: str = "logfmt"

    def collect_groups(self) -> frozenset[Group]:
        """The groups a collection reads (per-process utilisation needs the process list)."""
        if Group.PROCESSES not in self.groups:
            return self.groups - {Group.PROCESS_UTILIZATION}
        return self.groups

    def exposition_options(self) -> ExpositionOptions:
        """Cardinality and privacy knobs for exposition."""
        return ExpositionOptions(
            groups=self.groups | {Group.EXPORTER},
            pid_label=self.pid_label,
            max_process_series_per_gpu=self.max_series_per_gpu,
            workload_labels=self.workload_labels,
        )


#: A value that argparse would take for an option: "-1s", "-5", "-.5".
_NEGATIVE = re.compile(r"-\.?[0-9]")


def attach_negative_values(args: Sequence[str]) -> list[str]:
    """``--flag -1s`` -> ``--flag=-1s`` for value flags.

    argparse reads "-1s" as an option, so the user would see "expected one argument" instead
    of the flag's range; attached with "=", the value reaches the flag's own check.
    """
    value_flags = {f"--{flag.name}" for flag in FLAGS if not flag.is_bool}
    out: list[str] = []
    pending = False  # the previous token is a value flag still waiting for its value
    for arg in args:
        if pending and _NEGATIVE.match(arg):
            out[-1] = f"{out[-1]}={arg}"
            pending = False
            continue
        pending = arg in value_flags
        out.append(arg)
    return out


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (not 30 lines of usage before it), and negative values
    of value flags read as values (``attach_negative_values``)."""

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: Any = None) -> Any:
        if args is None:
            args = sys.argv[1:]
        return super().parse_args(attach_negative_values(args), namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _commands_text() -> str:
    rows = [("(none)", "run the exporter: serve GPU metrics on /metrics (the flags below)"),
            *COMMANDS]
    width = max(len(name) for name, _ in rows)
    return "\n".join(
        textwrap.fill(text, 79, initial_indent=f"  {name:<{width}}  ",
                      subsequent_indent=" " * (width + 4)) for name, text in rows)


def build_parser(scenario_help: str = "") -> argparse.ArgumentParser:
    """The argparse parser; every value flag is read as a string and parsed later. ``--help``
    lists the subcommands first, then the flags by section (``FLAG_SECTIONS``)."""
    parser = _Parser(
        prog="gpu-exporter",
        usage="gpu-exporter [FLAGS]\n       gpu-exporter COMMAND [COMMAND FLAGS]",
        description="Prometheus exporter for NVIDIA GPUs: who and what is using GPU memory.\n\n"
        f"commands:\n{_commands_text()}\n\n" + textwrap.fill(
            f"Every flag can also be set as an environment variable {ENV_PREFIX}<FLAG> "
            "(upper case, '.' and '-' become '_'); flags win.", 79),
        epilog=textwrap.fill(scenario_help, 79, break_on_hyphens=False) or None,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpu-exporter {__version__}")
    sections = {title: parser.add_argument_group(title)
                for title in (*(title for title, _ in FLAG_SECTIONS), OTHER_SECTION)}
    for flag in FLAGS:
        section = sections[flag_section(flag)]
        limits = f"; range {RANGES[flag.name]}" if flag.name in RANGES else ""
        env_note = f" [env {flag.env}; default {flag.default_text or 'none'}{limits}]"
        if flag.is_bool:
            section.add_argument(
                f"--{flag.name}", dest=flag.dest, action=argparse.BooleanOptionalAction,
                default=None, help=flag.help + env_note,
            )
        else:
            section.add_argument(
                f"--{flag.name}", dest=flag.dest, default=None, metavar=flag.metavar,
                help=flag.help + env_note,
            )
    return parser


def _value(flag: Flag, raw: Any, origin: str) -> Any:
    if flag.is_bool and isinstance(raw, bool):
        return raw
    # Bytes that are not UTF-8 arrive as lone surrogates (surrogateescape); only file names
    # may be such bytes: anything else ends up in labels and pages, which must be UTF-8.
    if flag.parse is not parse_path and not str(raw).isascii():
        try:
            str(raw).encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(f"invalid value for {origin}: {raw!a} is not valid UTF-8"
                              ) from None
    try:
        if flag.is_bool:
            return parse_bool(str(raw))
        assert flag.parse is not None
        value = flag.parse(str(raw))
        if flag.name in RANGES:
            RANGES[flag.name].check(value, str(raw))
        return value
    except ValueError as exc:
        raise ConfigError(f"invalid value for {origin}: {exc}") from None


def resolve(namespace: argparse.Namespace, environ: Mapping[str, str]) -> Config:
    """Combine parsed flags, environment variables and defaults into a ``Config``.

    Raises:
        ConfigError: a value does not parse, or values contradict each other.
    """
    values: dict[str, Any] = {}
    for flag in FLAGS:
        given = getattr(namespace, flag.dest, None)
        if given is not None:
            values[flag.dest] = _value(flag, given, f"--{flag.name}")
        elif flag.env in environ:
            values[flag.dest] = _value(flag, environ[flag.env], flag.env)
        elif flag.default is None or flag.is_bool:
            values[flag.dest] = flag.default
        else:
            values[flag.dest] = _value(flag, flag.default, f"--{flag.name} default")
    groups = frozenset(g for g in SWITCHABLE_GROUPS if values.pop(f"collector_{g.value}"))
    kinds = tuple(kind for kind in KINDS if values.pop(f"workload_{kind.name}"))
    ids = frozenset(label.name for kind in KINDS for label in kind.id_labels
                    if values.pop(f"id_label_{label.name}"))
    config = Config(groups=groups, workload_labels=WorkloadLabels(kinds, ids), **values)
    _check(config)
    return config


def _check(config: Config) -> None:
    if config.source == "simulated" and not config.scenario:
        presets = ", ".join(list_presets()) or "none installed"
        raise ConfigError(f"--source simulated needs --scenario NAME|PATH (presets: {presets}; "
                          "or synthetic:<gpus>x<processes>)")
    if config.source != "simulated" and config.scenario:
        raise ConfigError("--scenario only applies to --source simulated")


def unknown_env(environ: Mapping[str, str]) -> list[str]:
    """``GPU_EXPORTER_*`` variables that match no flag (likely typos; the CLI warns)."""
    known = {f.env for f in FLAGS}
    return sorted(k for k in environ if k.startswith(ENV_PREFIX) and k not in known)


def flags_markdown_table() -> str:
    """docs/flags.md's tables: one per ``--help`` section, one row per flag."""
    parts = []
    for title in (*(title for title, _ in FLAG_SECTIONS), OTHER_SECTION):
        flags = [flag for flag in FLAGS if flag_section(flag) == title]
        if not flags:
            continue
        rows = [f"### {title}", "", "| flag | environment variable | default | meaning |",
                "|---|---|---|---|"]
        for flag in flags:
            name = f"`--[no-]{flag.name}`" if flag.is_bool else f"`--{flag.name}`"
            default = f"`{flag.default_text}`" if flag.default_text else "-"
            limits = f" Range: {RANGES[flag.name]}." if flag.name in RANGES else ""
            rows.append(f"| {name} | `{flag.env}` | {default} | {flag.help}{limits} |")
        parts.append("\n".join(rows))
    return "\n\n".join(parts)
