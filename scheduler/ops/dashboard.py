"""The ops web server: `/` (dashboard page), `/api/state` (its JSON), `/metrics`, `/healthz`.

DashboardObserver keeps the state the page shows, built from every pass the service reports;
the demo's terminal view reads the same state.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from scheduler.core.models import Plan, Snapshot, StartAction, StopAction, rfc3339
from scheduler.ops.history import History
from scheduler.ops.http_server import RunningServer, serve_in_thread
from scheduler.ops.inventory import Usage, usage
from scheduler.ops.metrics import CONTENT_TYPE, MetricsObserver
from scheduler.ops.palette import model_colours, text_on
from scheduler.ops.time_to_ready import ready_sentence

RECENT = 20


def _now() -> str:
    return rfc3339(datetime.now(UTC))


def _iso(at: float) -> str:
    return rfc3339(datetime.fromtimestamp(at, UTC))


def natural_key(name: str) -> list[tuple[int, int | str]]:
    """gpu-a100-2 before gpu-a100-10: the order nodes are shown in, on the page and in the
    terminal."""
    return [(1, int(part)) if part.isdigit() else (0, part) for part in re.split(r"(\d+)", name)]


def _gpu_entry(gpu: Any, use: Usage, shard_of: dict[str, str]) -> dict[str, Any]:
    holder = use.holders.get(gpu.id)
    entry: dict[str, Any] = {
        "id": gpu.id,
        "model": gpu.model,
        "memory_gb": gpu.memory_gb,
        "healthy": gpu.healthy,
        "holder": holder.model if holder else None,
        "replica": holder.replica if holder else None,
        "state": holder.state if holder else None,
        "shard": shard_of.get(gpu.id),  # "1/2": this node's part of a multi-node replica
        "mig": None,
    }
    if gpu.mig is not None:
        entry["mig"] = [
            {
                "id": s.id,
                "profile": s.profile,
                "healthy": s.healthy,
                "holder": h.model if (h := use.holders.get(s.id)) else None,
                "state": h.state if h else None,
            }
            for s in gpu.mig
        ]
    return entry


def _multi_node(snapshot: Snapshot) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Replicas whose shards span nodes, each as one entry (its nodes and their GPUs), and
    which shard each of their devices is ("1/2")."""
    names = {n.id: n.name for n in snapshot.nodes}
    replicas, shard_of = [], {}
    for rep in snapshot.replicas:
        if len({s.node for s in rep.shards}) < 2:
            continue
        for i, shard in enumerate(rep.shards):
            for dev in shard.gpus:
                shard_of[dev] = f"{i + 1}/{len(rep.shards)}"
        replicas.append(
            {
                "id": rep.id,
                "model": rep.model,
                "state": rep.state,
                "shards": [{"node": names.get(s.node, s.node), "gpus": len(s.gpus)}
                           for s in rep.shards],
            }
        )  # fmt: skip
    return replicas, shard_of


def _gpus_in_use(snapshot: Snapshot, use: Usage) -> int:
    """Whole GPUs held, and GPUs in MIG mode with any slice held."""
    return sum(
        (gpu.id in use.holders) if gpu.mig is None else any(s.id in use.holders for s in gpu.mig)
        for node in snapshot.nodes
        for gpu in node.gpus
    )


def _ready_text(ready: dict[str, Any]) -> str:
    return ready_sentence(ready["warm_s"], ready["cold_s"], ready["warm_nodes"], ready["learned"])


def _models(snapshot: Snapshot, plan: Plan) -> list[dict[str, Any]]:
    """The catalog's models, then those that left it while replicas of theirs run (retiring:
    their GPUs are on the map until they stop)."""
    live: dict[str, int] = {}
    for rep in snapshot.replicas:
        if rep.counts:
            live[rep.model] = live.get(rep.model, 0) + 1
    models = []
    for m in snapshot.models:
        status = plan.models.get(m.name)
        models.append(
            {
                "name": m.name,
                "owner": m.owner,
                "class": m.class_,
                "desired": status.desired if status else None,
                "live": status.live if status else live.get(m.name, 0),
                "pending": status.pending if status else None,
                "why": status.why if status else None,  # which signal set the count
                "retiring": None,
            }
        )
    catalog = {m.name for m in snapshot.models}
    for name in sorted({r.model for r in snapshot.replicas} - catalog):
        since = snapshot.retired.get(name)
        models.append(
            {
                "name": name, "owner": None, "class": None, "desired": 0,
                "live": live.get(name, 0), "pending": None, "why": None,
                # When its key went missing; "unknown" when the catalog read was incomplete.
                "retiring": rfc3339(since) if since else "unknown",
            }
        )  # fmt: skip
    return models


class DashboardObserver:
    """Implements scheduler.service.observer.PassObserver; `state()` is what `/api/state` serves."""

    def __init__(self, recent: int = RECENT, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {
            "updated_at": None,
            "passes": 0,
            "last_pass_s": None,
            "nodes": [],
            "models": [],
            "pending": [],
            "multi_node": [],
            "totals": {},
            "input_errors": [],
            "colours": {},
        }
        self._preemptions: deque[dict[str, Any]] = deque(maxlen=recent)
        self._action_errors: deque[dict[str, Any]] = deque(maxlen=recent)
        self._classes: dict[str, str] = {}
        self._last_pass_mono: float | None = None
        self.counts = {"starts": 0, "stops": 0, "preemptions": 0, "failed": 0}
        self.clock = clock
        self.history = History()
        # The service's learning of times to ready (what `status` shows), once attached.
        self._ready: Any = None

    def attach(self, service: Any) -> None:
        self._ready = getattr(service, "ready", None)

    def _nodes(self, snapshot: Snapshot, use: Usage, shard_of: dict[str, str]) -> list[Any]:
        nodes = [
            {
                "id": node.id,
                "name": node.name,
                "pool": node.pool,
                "eligible": node.eligible,
                "gpus": [_gpu_entry(gpu, use, shard_of) for gpu in node.gpus],
            }
            for node in snapshot.nodes
        ]
        nodes.sort(key=lambda n: natural_key(str(n["name"])))
        return nodes

    def pass_finished(
        self, snapshot: Snapshot, plan: Plan, duration_s: float, input_errors: list[str]
    ) -> None:
        use = usage(snapshot)
        classes: dict[str, str] = {m.name: m.class_ for m in snapshot.models}
        multi_node, shard_of = _multi_node(snapshot)
        nodes = self._nodes(snapshot, use, shard_of)
        models = _models(snapshot, plan)
        expected = self._ready.expected if self._ready is not None else {}
        for entry in models:
            ready = expected.get(str(entry["name"]))
            entry["time_to_ready"] = {**ready, "text": _ready_text(ready)} if ready else None
        colours = model_colours([m["name"] for m in models])
        waiting = sorted(name for name, s in plan.models.items() if s.pending)
        at = self.clock()
        with self._lock:
            since = self.history.waiting(waiting, at)
            self.history.add(at, _gpus_in_use(snapshot, use), len(waiting), duration_s)
            pending = [
                {
                    "model": name,
                    "class": classes.get(name),
                    "reason": plan.models[name].pending,
                    "code": plan.models[name].pending_code,
                    "since": _iso(since[name]),
                    "waited_s": round(at - since[name], 1),
                }
                for name in waiting
            ]
            self._classes = classes
            self._last_pass_mono = time.monotonic()
            self._state = {
                "updated_at": _iso(at),
                "passes": self._state["passes"] + 1,
                "last_pass_s": round(duration_s, 4),
                "nodes": nodes,
                "models": models,
                "pending": pending,
                "multi_node": multi_node,
                "advice": list(plan.advice),
                "totals": {
                    "gpus": use.gpus_total,
                    "gpus_allocated": use.gpus_allocated,
                    "mig": use.mig_total,
                    "mig_allocated": use.mig_allocated,
                    "utilisation": round(use.gpu_utilisation, 4),
                },
                "input_errors": list(input_errors),
                # name -> background and the label colour that reads on it; the terminal
                # view uses the same ones.
                "colours": {n: {"bg": c, "fg": text_on(c)} for n, c in colours.items()},
            }

    def pass_carried(self, duration_s: float, input_errors: list[str]) -> None:
        """A pass carried over (nothing changed): the picture stands; the pass is counted."""
        at = self.clock()
        with self._lock:
            self.history.add(at, None, None, duration_s)
            self._last_pass_mono = time.monotonic()
            self._state = {
                **self._state,
                "updated_at": _iso(at),
                "passes": self._state["passes"] + 1,
                "last_pass_s": round(duration_s, 4),
                "input_errors": list(input_errors),
            }

    def action_done(self, action: StartAction | StopAction, ok: bool, error: str | None) -> None:
        with self._lock:
            if not ok:
                self.counts["failed"] += 1
                self._action_errors.appendleft(
                    {"at": _now(), "op": action.op, "model": action.model, "error": error}
                )
                return
            self.counts["starts" if action.op == "start" else "stops"] += 1
            if isinstance(action, StopAction) and action.preempted_for:
                self.counts["preemptions"] += 1
                self._preemptions.appendleft(
                    {
                        "at": _now(),
                        "victim": action.model,
                        "replica": action.replica,
                        "victim_class": self._classes.get(action.model),
                        "for": action.preempted_for,
                        "for_class": self._classes.get(action.preempted_for),
                        "reason": action.reason,
                        "code": action.code,
                    }
                )

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                **self._state,
                "history": {"window_s": self.history.window_s, "points": self.history.points()},
                "preemptions": list(self._preemptions),
                "action_errors": list(self._action_errors),
                "counts": dict(self.counts),
            }

    def seconds_since_pass(self) -> float | None:
        with self._lock:
            last = self._last_pass_mono
        return None if last is None else time.monotonic() - last


MISSING_PAGE = (
    "<!doctype html><title>llm-scheduler</title><p>The dashboard page is not in this install "
    "(package data scheduler/ops/web/ is missing); <a href='api/state'>api/state</a> and "
    "<a href='metrics'>metrics</a> still work.</p>"
)


def _page() -> str:
    try:
        page = resources.files("scheduler.ops") / "web" / "index.html"
        return page.read_text(encoding="utf-8")
    except OSError:  # a wheel built without the page: keep the API up
        return MISSING_PAGE


def create_app(
    dashboard: DashboardObserver | None = None, metrics: MetricsObserver | None = None
) -> Starlette:
    dashboard = dashboard or DashboardObserver()
    page = _page()

    async def index(request: Request) -> Response:
        return HTMLResponse(page)

    async def api_state(request: Request) -> Response:
        return JSONResponse(dashboard.state(), headers={"Cache-Control": "no-store"})

    async def metrics_route(request: Request) -> Response:
        if metrics is None:
            return Response("metrics are not enabled\n", status_code=404, media_type="text/plain")
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    async def healthz(request: Request) -> Response:
        if metrics is not None and metrics.health_check is not None:
            # The service's own view: failing passes, unreachable servers, stale watches.
            report = metrics.health_check()
            return JSONResponse(report, status_code=200 if report["ok"] else 503)
        age = dashboard.seconds_since_pass()
        return JSONResponse(
            {"ok": True, "passes": dashboard.state()["passes"], "last_pass_age_s": age}
        )

    return Starlette(
        routes=[
            Route("/", index),
            Route("/api/state", api_state),
            Route("/metrics", metrics_route),
            Route("/healthz", healthz),
        ]
    )


def serve_ops(*observers: object, host: str = "127.0.0.1", port: int = 9464) -> RunningServer:
    """Serve the ops endpoints for the DashboardObserver and MetricsObserver among `observers`."""
    dashboard = next((o for o in observers if isinstance(o, DashboardObserver)), None)
    metrics = next((o for o in observers if isinstance(o, MetricsObserver)), None)
    return serve_in_thread(create_app(dashboard, metrics), port=port, host=host, name="ops")


def parse_listen(addr: str) -> tuple[str, int]:
    """`host:port` (as in LLM_SCHEDULER_LISTEN_ADDR) -> (host, port); a bare port means loopback."""
    host, _, port = addr.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"listen address {addr!r} is not host:port") from None
    return (host.strip("[]") or "127.0.0.1", number)
