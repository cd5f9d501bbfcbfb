"""The dashboard page in headless Chromium (Debian's `chromium` package; .ci/run installs it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from llm_scheduler_standins.fleet import builtin_fleet
from scheduler.core.models import ModelStatus, Node, Plan, Replica, Shard, Snapshot
from scheduler.demo import catalog
from scheduler.ops.dashboard import DashboardObserver, natural_key, serve_ops
from scheduler.ops.palette import contrast

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
    ),
]


def _chromium(*args: str, tmp: Path) -> str:
    assert CHROMIUM
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp / 'profile'}", *args,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _demo_fleet_state() -> tuple[Snapshot, Plan]:
    """The demo's ten models spread over the stand-ins' fleet, MIG slices included."""
    nodes = [Node.model_validate(n.model_dump()) for n in builtin_fleet()]
    free = {n.id: [g.id for g in n.gpus if g.mig is None] for n in nodes}
    slices = {(s.profile, s.id): n.id for n in nodes for g in n.gpus for s in g.mig or []}
    replicas = []
    for i, model in enumerate(sorted(catalog.MODELS, key=lambda m: m.name)):
        p = model.profiles[0]
        if p.is_mig:
            sid = next(s for (prof, s) in slices if prof == p.mig_profile)
            node = slices.pop((p.mig_profile, sid))
            shards = [Shard(node=node, gpus=[sid])]
        else:
            node = next(n for n, gpus in free.items() if len(gpus) >= p.gpus)
            take, free[node] = free[node][: p.gpus], free[node][p.gpus :]
            shards = [Shard(node=node, gpus=take)]
        state = "starting" if i % 4 == 3 else "running"
        replicas.append(Replica(id=f"r-{i}", model=model.name, profile=p.name, state=state,
                                created_at=NOW, shards=shards))  # fmt: skip
    snap = Snapshot(now=NOW, nodes=nodes, models=catalog.MODELS, replicas=replicas)
    statuses = {m.name: ModelStatus(desired=1, live=1) for m in catalog.MODELS}
    statuses["gemma-2-27b"] = ModelStatus(desired=2, live=1, pending="profile tp2: no room")
    return snap, Plan(models=statuses)


def _rgb_hex(css: str) -> str:
    r, g, b = (int(v) for v in re.findall(r"\d+", css)[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def test_dashboard_renders_the_fleet_readably(tmp_path: Path) -> None:
    dash = DashboardObserver()
    snap, plan = _demo_fleet_state()
    dash.pass_finished(snap, plan, 0.01, [])
    server = serve_ops(dash, port=0)
    try:
        page = server.url + "/?check"
        dom = _chromium("--virtual-time-budget=5000", "--dump-dom", page, tmp=tmp_path)
        shots = Path(os.environ.get("LLM_SCHEDULER_SCREENSHOTS", tmp_path))
        shots.mkdir(parents=True, exist_ok=True)
        shot = shots / "dashboard.png"
        _chromium(
            "--virtual-time-budget=5000", "--window-size=1600,1000", f"--screenshot={shot}",
            page, tmp=tmp_path,
        )  # fmt: skip
    finally:
        server.stop()
    assert "waiting for the first pass" not in dom
    # Nodes in the terminal view's order: natural by name, as the state lists them.
    shown = re.findall(r'data-node="([^"]+)"', dom)
    assert shown == [n["name"] for n in dash.state()["nodes"]]
    assert shown == sorted((n.name for n in snap.nodes), key=natural_key)
    # Every model its own colour, one colour per model, and labels that read on it.
    painted = re.findall(r'data-holder="([^"]+)"[^>]*?style="background: (rgb\([^)]*\)); '
                         r'color: (rgb\([^)]*\));"', dom)  # fmt: skip
    by_model: dict[str, set[str]] = {}
    for holder, bg, fg in painted:
        by_model.setdefault(holder, set()).add(_rgb_hex(bg))
        assert contrast(_rgb_hex(bg), _rgb_hex(fg)) >= 4.5, (holder, bg, fg)
    assert set(by_model) == {m.name for m in catalog.MODELS}
    assert all(len(c) == 1 for c in by_model.values()), by_model
    assert len({next(iter(c)) for c in by_model.values()}) == len(by_model)
    # Held GPUs: as many boxes as devices each model holds, whole or MIG.
    for rep in snap.replicas:
        held = sum(len(s.gpus) for s in rep.shards)
        assert dom.count(f'data-holder="{rep.model}"') == held, rep.model
    # No label is cut: not the model names, not the MIG profiles.
    assert 'data-clipped="true"' not in dom
    for node in snap.nodes:
        for gpu in node.gpus:
            for s in gpu.mig or []:
                assert f'<span class="profile">{s.profile}</span>' in dom
    assert 'data-pending="gemma-2-27b"' in dom
    assert shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
