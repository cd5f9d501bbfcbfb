"""Evaluation GC: a stand-in under churn must not keep every evaluation and allocation it ever
made. Nomad's core scheduler (nomad/core_sched.go evalGC, gcEval, allocGCEligible) reaps, every
eval_gc_interval, terminal evaluations older than eval_gc_threshold (1 h) together with their
terminal allocations; an evaluation with an allocation that cannot go yet stays. The job
summary is a table of counters the GC does not touch (state_store.go updateSummaryWithAlloc),
so what was reaped still counts there."""

from __future__ import annotations

from nomad_helpers import gpu_job

from llm_scheduler_standins.fleet import builtin_fleet
from llm_scheduler_standins.nomad.state import Cluster

FLEET = builtin_fleet()[:2]


def _cluster(threshold_s: float) -> Cluster:
    return Cluster(
        FLEET,
        registry=None,
        load_delay_s=60,
        region="global",
        seed=1,
        eval_gc_threshold_s=threshold_s,
        eval_gc_interval_s=0,
    )


def test_terminal_evaluations_go_with_their_allocations_and_the_summary_keeps_them() -> None:
    cluster = _cluster(3600)
    try:
        for n in range(3):
            cluster.register(gpu_job(f"j{n}", count=1)["Job"])
        cluster.deregister("default", "j0", purge=False)
        before = cluster.job_summary("default", "j0")
        assert before is not None and before["Summary"]["shard-0"]["Complete"] == 1
        assert len(cluster.evaluations(job_id="j0")) == 2
        index = cluster.table_index("evals")
        cluster.eval_gc_threshold_s = 0  # an hour later
        cluster.register(gpu_job("j3", count=1)["Job"])  # any write runs the GC
        assert cluster.table_index("evals") > index
        assert [a["JobID"] for a in cluster.allocs(job_id="j0")] == []
        assert cluster.evaluations(job_id="j0") == []
        assert cluster.job_summary("default", "j0") == before
        # A live allocation keeps the evaluation that placed it.
        for n in (1, 2, 3):
            (alloc,) = cluster.allocs(job_id=f"j{n}")
            assert cluster.evaluation(alloc["EvalID"]) is not None
    finally:
        cluster.close()


def test_a_blocked_evaluation_and_young_ones_stay() -> None:
    cluster = _cluster(3600)
    try:
        cluster.register(gpu_job("big", count=64)["Job"])  # more GPUs than the fleet has
        cluster.register(gpu_job("small", count=1)["Job"])
        cluster.deregister("default", "small", purge=False)
        cluster.register(gpu_job("other", count=1)["Job"])
        statuses = sorted(e["Status"] for e in cluster.evaluations(job_id="big"))
        assert statuses == ["blocked", "complete"]
        assert len(cluster.evaluations(job_id="small")) == 2  # not an hour old yet
        assert len(cluster.allocs(job_id="small")) == 1
    finally:
        cluster.close()
