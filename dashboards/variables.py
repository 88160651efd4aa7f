"""Template variables, chained: datasource -> job -> node -> (hidden) instance -> gpu -> user.

``node`` lists the ``hostname`` label of ``gpu_info`` (the name the exporter's host reports);
the hidden ``instance`` variable turns the chosen nodes into scrape targets so every query can
filter on ``job`` and ``instance`` directly, whether or not a Kubernetes ``node`` label exists.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import dashboard as dashboard_model

from dashboards.panels import DATASOURCE
from dashboards.promql import sel, sel_record
from exporter.catalogue import metrics
from exporter.catalogue.workloads import KINDS

JOB = 'job=~"$job"'
INSTANCE = 'instance=~"$instance"'
NODE = 'hostname=~"$node"'
GPU = 'gpu=~"$gpu"'
USER = 'user=~"$user"'
#: The matchers of every per-host query, and of per-user ones.
HOST = f"{JOB}, {INSTANCE}"
HOST_USER = f"{HOST}, {USER}"

_ALL = dashboard_model.VariableOption(text="All", value="$__all", selected=True)
Variable = cogbuilder.Builder[dashboard_model.VariableModel]


def datasource() -> dashboard.DatasourceVariable:
    """The Prometheus data source every panel uses (no ``__inputs``: provisioning-safe)."""
    return dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")


def _query(name: str, label: str, expr: str, *, multi: bool = True) -> dashboard.QueryVariable:
    var = (
        dashboard.QueryVariable(name)
        .label(label)
        .query(expr)
        .definition(expr)
        .datasource(DATASOURCE)
        .refresh(dashboard_model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_model.VariableSort.NATURAL_ASC)
    )
    if multi:
        var = var.multi(True).include_all(True).current(_ALL)
    return var


def job(source: metrics.Metric = metrics.GPU_INFO) -> dashboard.QueryVariable:
    """Scrape jobs that expose ``source``."""
    return _query("job", "Job", f"label_values({source.name}, job)")


def node(*, multi: bool = True) -> dashboard.QueryVariable:
    """Host names (``gpu_info``'s ``hostname``) in the chosen jobs."""
    return _query(
        "node", "Node", f"label_values({sel(metrics.GPU_INFO, JOB)}, hostname)", multi=multi
    )


def instance() -> dashboard.QueryVariable:
    """Hidden: the scrape targets of the chosen nodes."""
    expr = f"label_values({sel(metrics.GPU_INFO, JOB, NODE)}, instance)"
    return _query("instance", "Instance", expr).hide(dashboard_model.VariableHide.HIDE_VARIABLE)


def target() -> dashboard.QueryVariable:
    """Visible scrape targets of the chosen jobs, from ``up`` (also lists targets that are down)."""
    return _query("instance", "Instance", f"label_values(up{{{JOB}}}, instance)")


def gpu() -> dashboard.QueryVariable:
    """GPU indexes on the chosen targets."""
    return _query("gpu", "GPU", f"label_values({sel(metrics.GPU_INFO, HOST)}, gpu)")


def user() -> dashboard.QueryVariable:
    """Users holding GPU memory on the chosen targets."""
    return _query("user", "User", f"label_values({sel(metrics.USER_MEMORY, HOST)}, user)")


def workload_labels() -> list[Variable]:
    """A variable per ``group_by`` label of every workload kind (namespace, pod of the chosen
    namespaces, Slurm job) on the chosen targets, from the per-workload series (and the
    allocations, for the labels they carry)."""
    found: list[Variable] = []
    for kind in KINDS:
        for position, label in enumerate(kind.group_by):
            chosen = [f'{outer}=~"${outer}"' for outer in kind.group_by[:position]]
            families = [row for row in (metrics.ALLOCATION_INFO, metrics.WORKLOAD_MEMORY)
                        if label in row.labels]
            series = (sel(families[0], HOST, *chosen) if len(families) == 1 else sel_record(
                "", f'__name__=~"{"|".join(row.name for row in families)}"', HOST, *chosen))
            title = label.replace("_", " ").capitalize()
            found.append(_query(label, title, f"label_values({series}, {label})"))
    return found


def host_chain(*more: Variable, one_node: bool = False) -> list[Variable]:
    """datasource -> job -> node -> hidden instance, then ``more`` (``one_node``: no multi-pick)."""
    return [datasource(), job(), node(multi=not one_node), instance(), *more]
