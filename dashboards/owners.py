"""Owner alerts: who they name, and what their notice shows so the owner can act.

An owner alert (``audience: owner``) is about what one user, pod or batch job holds or does.
Its labels name the owner (``OWNER_LABELS``: ``user``, ``namespace``/``pod`` or ``slurm_job``)
so that Alertmanager can route it to them. Alerts that the metrics raise per GPU (a GPU held
idle, starved, heading for out-of-memory) are attributed to the users holding memory on that
GPU (``per_holder``): one alert per GPU and holder, or the plain per-GPU alert where no holder
is known, which Alertmanager then hands to the operator.

The notice itself needs per-process facts no rule reads (alerts stay per user or GPU, never per
process): the ``processes`` and ``commands`` annotations query the per-process series of the
alert's owner when Prometheus evaluates an active alert, a few series per alert, with the node,
GPU, pid, process name, memory held and idle time, and the exact command that ends each
workload (``kill PID``, ``scancel JOB``, ``kubectl delete pod -n NS POD``).
"""

from __future__ import annotations

from dashboards.promql import NOT_OVERFLOW, num
from exporter.catalogue import metrics, thresholds

#: Labels that name an owner; an owner alert carries at least one of them, non-empty.
OWNER_LABELS = ("user", "namespace", "slurm_job")
#: Alert labels that per-process series do not carry, left out when an annotation looks up the
#: alert's processes by its labels.
NOT_PROCESS_LABELS = ("device_id", "gpu_instance", "resource", "sharing", "reason", "owner_alert",
                      "alertname", "audience", "severity", "__name__")
#: At most this many processes are listed in one notice.
PROCESS_LIST_LIMIT = 10

MEMORY = metrics.PROCESS_MEMORY.name
LAST_ACTIVE = metrics.PROCESS_LAST_ACTIVE.name
START_TIME = metrics.PROCESS_START_TIME.name
GPU_INFO = metrics.GPU_INFO.name


def holders(min_bytes: float = thresholds.IDLE_PROCESS_MEMORY_BYTES) -> str:
    """Per GPU and user, the users holding more than ``min_bytes`` on a GPU (a bare CUDA
    context or a desktop's few hundred MiB do not make someone the holder)."""
    return f"{metrics.USER_MEMORY.name} > {num(min_bytes)}"


def growing_holders(window: str) -> str:
    """Per GPU and user, the users whose memory on the GPU grew over ``window``."""
    return f"delta({metrics.USER_MEMORY.name}[{window}]) > 0"


def per_holder(expr: str, holder_expr: str) -> str:
    """A per-GPU alert expression as one series per GPU and holder (``user`` label; the value
    stays ``expr``'s), or the per-GPU series where no holder matches (the owner is unknown:
    processes without a readable owner, or the process collector switched off).

    ``holder_expr`` yields per-GPU-and-user series with the same labels as ``expr`` plus
    ``user``."""
    return (
        f"(\n{_indent(expr)}\n) * ignoring (user) group_right ()\n"
        f"  (0 * ({holder_expr}) + 1)\n"
        f"or ignoring (user) (\n{_indent(expr)}\n)\n"
    )


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.strip().splitlines())


def _matchers() -> str:
    """Template text setting ``$m`` to PromQL matchers (``k="v",``) of the alert's labels that
    process series carry too."""
    skip = "|".join(NOT_PROCESS_LABELS)
    return (
        '{{ $m := "" }}{{ range $k, $v := $labels }}'
        f'{{{{ if not (match "^({skip})$" $k) }}}}'
        '{{ $m = printf "%s%s=%q," $m $k $v }}{{ end }}{{ end }}'
    )


def all_processes() -> str:
    """PromQL (with ``%s`` for the matchers) for every process of the alert's owner."""
    return f"{MEMORY}{{%s{NOT_OVERFLOW}}} > 0"


def idle_processes() -> str:
    """PromQL (with ``%s`` for the matchers) for the owner's idle processes, as the exporter
    counts them in ``gpu_user_idle_memory_bytes`` over the idle window."""
    return (
        f"{MEMORY}{{%s{NOT_OVERFLOW}}} > {num(thresholds.IDLE_PROCESS_MEMORY_BYTES)} and "
        f"max_over_time({metrics.PROCESS_UTILIZATION.name}{{%s{NOT_OVERFLOW}}}"
        f"[{thresholds.IDLE_AVG_WINDOW}]) < {num(thresholds.IDLE_UTILIZATION_RATIO)}"
    )


def _query(processes: str) -> str:
    """Template text: the query listing ``processes`` (largest first, with the node's host
    name and the GPU's model from gpu_info), for ``printf`` with the matchers."""
    return (f"topk({PROCESS_LIST_LIMIT}, {processes}) * on (job, instance, gpu, uuid) "
            f"group_left (hostname, name) {GPU_INFO}")


def _printf(query: str) -> str:
    """``printf`` of ``query`` with one ``$m`` per ``%s`` in it."""
    return f'printf "{_escape(query)}"' + " $m" * query.count("%s")


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


#: Template text naming one process series (``.``, with ``$p`` bound to it): where, which
#: process, whose workload.
_PROCESS_LINE = (
    "- {{ with $p.Labels.hostname }}{{ . }}{{ else }}{{ $p.Labels.instance }}{{ end }}"
    " GPU {{ $p.Labels.gpu }}{{ with $p.Labels.name }} ({{ . }}){{ end }}:"
    " pid {{ with $p.Labels.pid }}{{ . }}{{ else }}(not exported){{ end }}"
    " {{ $p.Labels.process }}, user {{ $p.Labels.user }}"
    "{{ with $p.Labels.slurm_job }}, Slurm job {{ . }}{{ end }}"
    "{{ with $p.Labels.pod }}, pod {{ $p.Labels.namespace }}/{{ . }}{{ end }},"
    " holds {{ $p.Value | humanize1024 }}B"
)


def _idle_times() -> str:
    """Template text setting ``$idle`` to how long each of the owner's processes has done no
    GPU work (one query): since its last active sample (``seen="last"``), or, when none was
    seen since the exporter started watching it, since its start (``seen="start"``)."""
    sel = f"{{%s{NOT_OVERFLOW}}}"
    query = (
        f'label_replace(time() - {LAST_ACTIVE}{sel}, "seen", "last", "", "") or '
        f'label_replace(time() - ({START_TIME}{sel} unless {LAST_ACTIVE}{sel}), "seen", '
        '"start", "", "")'
    )
    return f"{{{{ $idle := {_printf(query)} | query }}}}"


#: Template text appending the idle time of the process ``$p`` from ``$idle``.
_IDLE_PART = (
    "{{ range $idle }}{{ if and (eq .Labels.pid $p.Labels.pid) (eq .Labels.gpu $p.Labels.gpu)"
    " (eq .Labels.instance $p.Labels.instance) }}{{ if eq .Labels.seen \"last\" }}, last GPU "
    "work {{ .Value | humanizeDuration }} ago{{ else }}, no GPU work seen, running for "
    "{{ .Value | humanizeDuration }}{{ end }}{{ end }}{{ end }}"
)


def process_list(processes: str, *, idle: bool) -> str:
    """The ``processes`` annotation: one line per process of ``processes`` (PromQL with ``%s``
    for the alert's matchers), with its idle time when ``idle``: two queries per alert and
    evaluation, however many processes."""
    return (
        _matchers() + (_idle_times() if idle else "")
        + f"{{{{ range {_printf(_query(processes))} | query | sortByLabel \"pid\" }}}}"
        + "{{ $p := . }}"
        + _PROCESS_LINE + (_IDLE_PART if idle else "") + "\n{{ end }}"
    )


def commands(processes: str) -> str:
    """The ``commands`` annotation: what ends each workload among ``processes`` (PromQL with
    ``%s`` for the matchers), once per workload: ``scancel`` for Slurm jobs, ``kubectl delete
    pod`` for pods, ``kill`` (on its node) for the other processes. One query: PromQL writes
    each command into an ``end`` label and counts by it, so a job's ranks give one line."""
    query = _query(processes)
    jobs = query.replace("%s", '%sslurm_job!="",', 1)
    pods = query.replace("%s", '%spod!="",', 1)
    others = query.replace("%s", '%sslurm_job="",pod="",pid!="",', 1)
    commands_query = (
        f'count by (end) (label_replace({jobs}, "end", "scancel $1", "slurm_job", "(.+)") or '
        f'label_replace(label_join({pods}, "end", " ", "namespace", "pod"), "end", '
        '"kubectl delete pod -n $1", "end", "(.+)") or '
        f'label_replace(label_join({others}, "end", "  # on ", "pid", "hostname"), "end", '
        '"kill $1", "end", "(.+)"))'
    )
    return (
        _matchers()
        + f"{{{{ range {_printf(commands_query)} | query | sortByLabel \"end\" }}}}"
        "{{ .Labels.end }}\n{{ end }}"
    )


def pod_command() -> str:
    """The ``commands`` annotation of an alert that names a pod (or a Slurm job) itself (its
    labels: a job's allocation carries ``slurm_job``)."""
    return ("{{ if $labels.slurm_job }}scancel {{ $labels.slurm_job }}{{ else }}"
            "kubectl delete pod -n {{ $labels.namespace }} {{ $labels.pod }}{{ end }}")


def escalation_note() -> str:
    """The ``escalation`` annotation of every owner alert: when someone else is told."""
    return (f"If this is still so {thresholds.OWNER_ESCALATE_AFTER} after this notice, the lab "
            "lead or operator is told.")


def details(processes: str | None, *, idle: bool, end_commands: bool) -> tuple[tuple[str, str],
                                                                               ...]:
    """An owner alert's extra annotations: its processes (``processes``: PromQL with ``%s``
    for the matchers; None: none listed), the commands that end them, and the escalation
    note."""
    notes: list[tuple[str, str]] = []
    if processes is not None:
        notes.append(("processes", process_list(processes, idle=idle)))
        if end_commands:
            notes.append(("commands", commands(processes)))
    notes.append(("escalation", escalation_note()))
    return tuple(notes)
