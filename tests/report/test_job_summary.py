"""Per-job summaries without Prometheus: the stored form (Jobstats' JS1 and the base-32 one),
Slurm's answers (a fake runner), the notes and the text and JSON outputs."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Sequence

import pytest

from exporter.catalogue import job_notes
from exporter.report import job_main
from exporter.report.admincomment import (
    SummaryError,
    decode,
    encode,
    encode_b32,
    to_json,
)
from exporter.report.costs import WorkloadCost
from exporter.report.job_main import json_text, text
from exporter.report.jobs import GpuSummary, JobSummary, Workload, finish, node_of
from exporter.report.slurm import SlurmError, job_facts, store_admin_comment
from exporter.report.timerange import TimeRange

GIB = 1024**3


def _summary() -> JobSummary:
    busy = GpuSummary("node1", "0", "GPU-a", "NVIDIA H100", "0", {
        "held_seconds": 3600.0, "utilization_ratio": 0.9, "sm_active_ratio": 0.7,
        "tensor_active_ratio": 0.01, "fp32_pipe_active_ratio": 0.4,
        "memory_total_bytes": 80.0 * GIB, "memory_peak_bytes": 70.0 * GIB,
        "process_memory_peak_bytes": 68.0 * GIB, "torch_allocated_peak_bytes": 60.0 * GIB,
        "idle_seconds": 0.0, "energy_joules": 2.5e6})
    idle = GpuSummary("node1", "1", "GPU-b", "NVIDIA H100", "3", {
        "held_seconds": 3600.0, "utilization_ratio": 0.0, "memory_total_bytes": 80.0 * GIB,
        "memory_peak_bytes": 0.6 * GIB, "idle_seconds": 3600.0, "energy_joules": 2.5e5})
    summary = JobSummary("job", "913377", 1_800_000_000.0, 1_800_003_600.0, user="alice",
                         state="COMPLETED", gpu_count=2, gpus=[busy, idle],
                         cpu={"node1": {"cpus": 12.0, "total_time": 40000.0}})
    finish(summary)
    return summary


def test_jobstats_reads_the_stored_form_as_its_own() -> None:
    stored = encode(_summary())
    assert stored.startswith("JS1:")
    doc = json.loads(gzip.decompress(base64.b64decode(stored[4:])))  # jobstats.py's steps
    node = doc["nodes"]["node1"]
    assert node["gpu_utilization"] == {"0": 90.0, "3": 0.0}  # keyed by minor number
    assert node["gpu_used_memory"] == {"0": 70 * GIB, "3": int(0.6 * GIB)}
    assert node["gpu_total_memory"] == {"0": 80 * GIB, "3": 80 * GIB}
    assert (node["cpus"], node["total_time"]) == (12.0, 40000.0)
    assert (doc["gpus"], doc["total_time"]) == (2, 3600)
    assert node["gpu_exporter"]["0"]["tensor_active_ratio"] == 0.01
    assert doc["gpu_exporter"]["user"] == "alice"


@pytest.mark.parametrize("form", [encode, encode_b32, lambda s: encode_b32(s).lower()])
def test_the_stored_forms_read_back(form) -> None:  # type: ignore[no-untyped-def]
    original = _summary()
    back = decode(form(original))
    assert back is not None
    assert back.source == "stored"
    assert (back.kind, back.name, back.user, back.start, back.end, back.gpu_count) == (
        "job", "913377", "alice", original.start, original.end, 2)
    assert [(g.gpu, g.minor_number, g.uuid, g.model) for g in back.gpus] == [
        ("0", "0", "GPU-a", "NVIDIA H100"), ("1", "3", "GPU-b", "NVIDIA H100")]
    assert [g.figures for g in back.gpus] == [g.figures for g in original.gpus]
    assert [g.notes for g in back.gpus] == [g.notes for g in original.gpus]
    assert back.cpu == original.cpu


def test_a_summary_jobstats_stored_reads_back_with_its_three_figures() -> None:
    doc = {"gpus": 1, "total_time": 50944, "nodes": {"della-k1g1": {
        "cpus": 12, "gpu_total_memory": {"1": 85899345920}, "gpu_used_memory": {"1": 83314868224},
        "gpu_utilization": {"1": 98.6}, "total_memory": 137438953472, "total_time": 57620.8,
        "used_memory": 84683702272}}}
    stored = "JS1:" + base64.b64encode(gzip.compress(json.dumps(doc).encode())).decode()
    back = decode(stored, "job", "12345678")
    assert back is not None
    (gpu,) = back.gpus
    assert (gpu.node, gpu.gpu, gpu.minor_number) == ("della-k1g1", "1", "1")
    assert gpu.figures == {"utilization_ratio": pytest.approx(0.986),
                           "memory_peak_bytes": 83314868224.0,
                           "memory_total_bytes": 85899345920.0,
                           "memory_peak_share": pytest.approx(83314868224 / 85899345920)}
    assert (back.name, back.end - back.start) == ("12345678", 50944)
    assert back.cpu["della-k1g1"]["cpus"] == 12


@pytest.mark.parametrize(("stored", "why"), [
    ("JS1:" + "a" * 10, "damaged"),
    ("JS1:" + base64.b64encode(b"not gzip").decode(), "not gzip"),
    ("JS1:" + base64.b64encode(gzip.compress(b"[1, 2]")).decode(), "no 'nodes'"),
    ("JS1:" + base64.b64encode(gzip.compress(b"{nope")).decode(), "not JSON"),
    ("js1:h4siaaaa", "lower case"),
    ("something else", "not a JS1"),
    ("JS1:" + base64.b64encode(gzip.compress(b" " * (17 << 20))).decode(), "inflates"),
])
def test_damaged_summaries_are_one_line_errors(stored: str, why: str) -> None:
    with pytest.raises(SummaryError, match=why):
        decode(stored)


def test_no_data_markers() -> None:
    assert decode("JS1:None") is None
    assert decode("JS1:Short") is None
    empty = JobSummary("job", "1", 0.0, 10.0)
    assert encode(empty) == "JS1:None"
    assert decode(encode_b32(empty).lower()) is None


def test_notes_come_from_the_table() -> None:
    busy, idle = _summary().gpus
    assert busy.notes == [next(n.text for n in job_notes.NOTES if n.name == "fp32").format(
        **busy.figures)]
    assert len(idle.notes) == 1  # held idle all the time: only that note
    assert idle.notes[0].startswith("held without use 100% of the time")
    small = {"held_seconds": 100.0, "idle_seconds": 0.0, "utilization_ratio": 0.5,
             "memory_peak_share": 0.1}
    assert [n.split(" ")[0] for n in job_notes.notes_for(small)] == ["peak"]
    low = {"held_seconds": 100.0, "idle_seconds": 30.0, "utilization_ratio": 0.1}
    assert [n.split(" ")[0] for n in job_notes.notes_for(low)] == ["held", "utilisation"]
    assert job_notes.notes_for({}) == []  # nothing measured: no note


def test_text_and_json() -> None:
    summary = _summary()
    out = text(summary)
    assert out.startswith("Job 913377 (user alice, COMPLETED): 2027-01-15 08:00 UTC to "
                          "2027-01-15 09:00 UTC (1h), 2 GPUs\n")
    assert "node1  0    NVIDIA H100  1h    90%   70%  1%      68.0/80 GiB  60.0 GiB" in out
    assert "Totals: held 2h GPU time, idle 1h (50%), energy 0.76 kWh" in out
    assert "CPU on node1: 12 cores, CPU time 11h6m" in out
    assert "node1 GPU 1: held without use 100% of the time" in out
    doc = json.loads(json_text(summary))
    assert doc["totals"] == {"held_seconds": 7200.0, "idle_seconds": 3600.0,
                             "energy_joules": 2.75e6}
    assert doc["figures"]["idle_seconds"]["unit"] == "seconds"
    assert doc["gpus"][1]["notes"] == summary.gpus[1].notes
    assert to_json(summary)["gpus"] == 2


def test_workloads_and_nodes() -> None:
    assert Workload.job("913377").matchers == 'slurm_job="913377"'
    assert Workload.pod("ml/trainer-0").matchers == 'namespace="ml", pod="trainer-0"'
    for bad in ('1"} or up{x="', "", "12 3"):
        with pytest.raises(ValueError, match="job id"):
            Workload.job(bad)
    for bad in ("ml", "/x", 'ml/a"b', "ml/"):
        with pytest.raises(ValueError, match="namespace/pod"):
            Workload.pod(bad)
    assert (node_of("node1:9477"), node_of("[::1]:9477"), node_of("node1")) == (
        "node1", "::1", "node1")


class FakeSlurm:
    """Slurm's commands as a test needs them: answers by command, and an accounting database
    whose sacctmgr lowercases what it stores (Slurm 22.05's)."""

    def __init__(self, sacct: str = "", scontrol: str = "", lowercase: bool = False) -> None:
        self.sacct, self.scontrol, self.lowercase = sacct, scontrol, lowercase
        self.calls: list[list[str]] = []
        self.comment = ""

    def __call__(self, argv: Sequence[str]) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        if argv[0] == "sacctmgr":
            value = argv[-1].removeprefix("AdminComment=")
            self.comment = value.lower() if self.lowercase else value
            return 0, " Modified jobs...\n  7 submitted at 1800000000\n", ""
        if argv[0] == "sacct" and argv[-1] == "AdminComment":
            return 0, self.comment + "\n", ""
        if argv[0] == "sacct":
            return (0, self.sacct, "") if self.sacct else (1, "", "accounting disabled")
        return (0, self.scontrol, "") if self.scontrol else (1, "", "Invalid job id")


def test_job_facts_from_sacct_else_scontrol() -> None:
    sacct = ("7|alice|COMPLETED|1800000000|1800003600|node[1-2]|billing=1,cpu=4,gres/gpu=2,"
             "node=2|physics|JS1:x\n")
    facts = job_facts("7", FakeSlurm(sacct=sacct))
    assert facts is not None
    assert (facts.user, facts.state, facts.start, facts.end, facts.nodes, facts.gpus,
            facts.admin_comment, facts.account) == ("alice", "COMPLETED", 1.8e9, 1800003600.0,
                                                    "node[1-2]", 2, "JS1:x", "physics")
    running = job_facts("7", FakeSlurm(sacct="7|bob|RUNNING|1800000000|Unknown|n1|cpu=1|lab||\n"))
    assert running is not None
    assert (running.end, running.gpus) == (None, None)
    ending = job_facts("7", FakeSlurm(  # the database has no end yet; slurmctld does
        sacct="7|bob|RUNNING|1800000000|Unknown|n1|cpu=1,gres/gpu=1|lab|\n",
        scontrol="JobId=7 UserId=bob(1) JobState=COMPLETED StartTime=1800000000 "
                 "EndTime=1800000042 NodeList=n1\n"))
    assert ending is not None
    assert (ending.end, ending.state, ending.gpus) == (1800000042.0, "COMPLETED", 1)
    scontrol = ("JobId=7 JobName=train UserId=carol(2003) GroupId=c(2003) JobState=COMPLETED "
                "StartTime=1800000000 EndTime=1800000060 NodeList=n1 "
                "AllocTRES=cpu=1,gres/gpu=1 Account=chem AdminComment=JS1:abc Command=(null)\n")
    found = job_facts("7", FakeSlurm(scontrol=scontrol))
    assert found is not None
    assert (found.user, found.end, found.gpus, found.admin_comment, found.account) == (
        "carol", 1800000060.0, 1, "JS1:abc", "chem")
    assert job_facts("7", FakeSlurm()) is None
    assert job_facts("8", FakeSlurm(sacct=sacct)) is None  # another job's line


def test_storing_keeps_jobstats_form_or_falls_back_to_base32() -> None:
    summary = _summary()
    slurm = FakeSlurm()
    assert store_admin_comment("7", encode(summary), encode_b32(summary), slurm) == \
        encode(summary)
    assert [c[0] for c in slurm.calls] == ["sacctmgr", "sacct"]
    lowering = FakeSlurm(lowercase=True)
    stored = store_admin_comment("7", encode(summary), encode_b32(summary), lowering)
    assert stored == encode_b32(summary).lower()
    back = decode(stored)
    assert back is not None
    assert back.gpus[0].figures["utilization_ratio"] == 0.9
    assert lowering.calls[0][-3:] == ["jobid=7", "set", f"AdminComment={encode(summary)}"]


def test_storing_fails_in_one_line() -> None:
    def refusing(argv: Sequence[str]) -> tuple[int, str, str]:
        return 1, "", "sacctmgr: error: Problem talking to the database: Connection refused\n"

    with pytest.raises(SlurmError, match="could not store job 7's AdminComment: sacctmgr: "
                       "error: Problem talking to the database"):
        store_admin_comment("7", "JS1:x", "JS1B32:X", refusing)


def test_the_summary_says_what_it_cost_or_why_not() -> None:
    summary = _summary()
    assert "Cost: not shown (no cost records: no prices set" in text(summary)
    summary.account = "physics"
    assert text(summary).startswith("Job 913377 (user alice, account physics, COMPLETED)")
    summary.cost = WorkloadCost("EUR", held=5.0, used=2.5, idle=2.5, energy=0.82)
    assert ("Cost: held 5.00 EUR (used 2.50, idle 2.50), energy 0.82 EUR; total 5.82 EUR"
            in text(summary))
    doc = json.loads(json_text(summary))
    assert doc["cost"] == {"currency": "EUR", "held": 5.0, "used": 2.5, "idle": 2.5,
                           "energy": 0.82, "total": 5.82}
    stored = decode(encode(summary))
    assert stored is not None
    assert "Cost: not stored with the summary" in text(stored)


def test_without_slurm_or_start_the_search_ends_at_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--since``/``--end`` bound the search for the workload's time: a finished range gives
    the same summary whenever it is asked."""
    searched: list[TimeRange] = []

    def held_span(client: object, workload: Workload, search: TimeRange, extra: str,
                  step: float) -> None:
        searched.append(search)

    monkeypatch.setattr(job_main, "held_span", held_span)
    args = job_main.build_parser().parse_args(
        ["job", "913377", "--no-slurm", "--since", "5m", "--end", "1796493000"])
    with pytest.raises(job_main.NoData):
        job_main.summarise(args, Workload.job("913377"), None)
    assert searched == [TimeRange(1796493000 - 300, 1796493000)]
