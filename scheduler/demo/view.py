"""What the demo shows: a rich live view for a terminal, plain lines otherwise, and a summary."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from scheduler.core.models import Plan, Snapshot, StartAction, StopAction
from scheduler.ops.inventory import usage
from scheduler.ops.palette import model_colours


@dataclass
class DemoStats:
    """A PassObserver that keeps what the final summary tells: who waited for room and how long,
    who gave way to whom, the busiest moment, and what was still pending at the end."""

    passes: int = 0
    pass_time_s: float = 0.0
    peak_pending: int = 0
    max_utilisation: float = 0.0
    max_gpus_allocated: int = 0
    peak_devices: tuple[int, int, int, int] = (0, 0, 0, 0)  # GPUs held/total, MIG held/total
    starts: int = 0
    stops: int = 0
    preemptions: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    classes: dict[str, str] = field(default_factory=dict)
    # Seconds each model spent pending (wanting more than it could be given room for).
    waited_s: dict[str, float] = field(default_factory=dict)
    longest_wait_s: dict[str, float] = field(default_factory=dict)
    wait_reason: dict[str, str] = field(default_factory=dict)  # the reason at its longest wait
    # (victim, victim class, beneficiary, beneficiary class) -> how many times.
    gave_way: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    final_pending: dict[str, str] = field(default_factory=dict)
    # Models scaled out for a latency objective (the first such start's reason), and
    # the reading that then met it.
    objective_out: dict[str, str] = field(default_factory=dict)
    objective_met: dict[str, str] = field(default_factory=dict)
    _last_now: datetime | None = field(default=None, repr=False)
    _waiting: dict[str, float] = field(default_factory=dict, repr=False)  # current wait so far
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def pass_finished(
        self, snapshot: Snapshot, plan: Plan, duration_s: float, input_errors: list[str]
    ) -> None:
        use = usage(snapshot)
        pending = {name: s.pending for name, s in plan.models.items() if s.pending}
        with self._lock:
            self.passes += 1
            self.pass_time_s += duration_s
            self.classes.update({m.name: m.class_ for m in snapshot.models})
            self.peak_pending = max(self.peak_pending, len(pending))
            if use.gpu_utilisation >= self.max_utilisation:
                self.peak_devices = (
                    use.gpus_allocated, use.gpus_total, use.mig_allocated, use.mig_total
                )  # fmt: skip
            self.max_utilisation = max(self.max_utilisation, use.gpu_utilisation)
            self.max_gpus_allocated = max(self.max_gpus_allocated, use.gpus_allocated)
            self._count_waits(snapshot.now, pending)
            self.final_pending = pending
            for m in snapshot.models:
                load, goal = snapshot.load.get(m.name), m.scaling.ttft_p90_ms
                if m.name not in self.objective_out or load is None or goal is None:
                    continue
                if load.ttft_p90_ms is not None and load.ttft_p90_ms <= goal:
                    self.objective_met.setdefault(
                        m.name, f"ttft p90 {load.ttft_p90_ms:.0f} ms <= {goal:.0f} ms"
                    )

    def _count_waits(self, now: datetime, pending: dict[str, str]) -> None:
        # The time since the last pass goes to the models that were pending then and still are.
        dt = (now - self._last_now).total_seconds() if self._last_now else 0.0
        self._last_now = now
        for name in list(self._waiting):
            if name not in pending:
                del self._waiting[name]
        for name, reason in pending.items():
            so_far = self._waiting.get(name)
            if so_far is None:
                self._waiting[name] = 0.0
                self.waited_s.setdefault(name, 0.0)
                self.wait_reason.setdefault(name, reason)
                continue
            self._waiting[name] = so_far + dt
            self.waited_s[name] += dt
            if self._waiting[name] >= self.longest_wait_s.get(name, 0.0):
                self.longest_wait_s[name] = self._waiting[name]
                self.wait_reason[name] = reason

    def action_done(self, action: StartAction | StopAction, ok: bool, error: str | None) -> None:
        with self._lock:
            if not ok:
                self.failed += 1
                if error and len(self.errors) < 5:
                    self.errors.append(f"{action.op} {action.model}: {error}")
            elif action.op == "start":
                self.starts += 1
                if any(f"{s} p90" in action.reason for s in ("ttft", "itl")) and (
                    " ms objective" in action.reason and " > " in action.reason
                ):
                    self.objective_out.setdefault(action.model, action.reason)
            else:
                self.stops += 1
                if isinstance(action, StopAction) and action.preempted_for:
                    self.preemptions += 1
                    key = (
                        action.model, self.classes.get(action.model, "?"),
                        action.preempted_for, self.classes.get(action.preempted_for, "?"),
                    )  # fmt: skip
                    self.gave_way[key] = self.gave_way.get(key, 0) + 1


def colours(state: dict[str, Any]) -> dict[str, str]:
    """The dashboard's colour of every model (scheduler.ops.palette), for rich."""
    given = {name: c["bg"] for name, c in (state.get("colours") or {}).items()}
    names = [m["name"] for m in state.get("models", [])]
    return given or model_colours(names)


def _cell(holder: str | None, state: str | None, colour: dict[str, str], label: str) -> Text:
    if holder is None:
        return Text("░" * len(label), style="grey35")
    style = colour.get(holder, "white")
    return Text(label, style=f"bold {style}" + (" dim" if state == "stopping" else ""))


def _fleet(state: dict[str, Any], colour: dict[str, str]) -> Table:
    """One row per node: a cell per GPU (MIG slices in brackets) in its holder's colour."""
    fleet = Table.grid(padding=(0, 1))
    fleet.add_column(style="bold", no_wrap=True)
    fleet.add_column()
    for node in state["nodes"]:  # in the dashboard's order (natural, by name)
        cells = Text()
        for gpu in node["gpus"]:
            if gpu["mig"] is not None:
                cells.append("[")
                for s in gpu["mig"]:
                    cells.append_text(_cell(s["holder"], s["state"], colour, "▪"))
                cells.append("] ")
            elif not gpu["healthy"] and gpu["holder"] is None:
                cells.append("××", style="bold red")
            else:
                cells.append_text(_cell(gpu["holder"], gpu["state"], colour, "██"))
                cells.append(" ")
        name = node["name"] + ("" if node["eligible"] else " (ineligible)")
        fleet.add_row(name, cells)
    return fleet


def render(state: dict[str, Any], clock: str, phase: str, dashboard_url: str | None) -> Group:
    colour = colours(state)
    totals = state.get("totals") or {}
    header = Text.assemble(
        ("llm-scheduler demo ", "bold"), (f"{clock}  ", "cyan"), (f"demand {phase}  ", "yellow"),
        f"GPUs {totals.get('gpus_allocated', 0)}/{totals.get('gpus', 0)}  ",
        f"MIG {totals.get('mig_allocated', 0)}/{totals.get('mig', 0)}  ",
        f"passes {state['passes']}",
        (f"  dashboard {dashboard_url}/" if dashboard_url else "", "dim"),
    )  # fmt: skip
    fleet = _fleet(state, colour)
    models = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("model", "class", "live/desired"):
        models.add_column(col, no_wrap=True)
    for m in state["models"]:
        desired = m["desired"] if m["desired"] is not None else "-"
        short = m["desired"] is not None and m["live"] < m["desired"]
        models.add_row(
            Text(m["name"], style=colour[m["name"]]), m["class"] or "retiring",
            Text(f"{m['live']}/{desired}", style="yellow" if short else "green"),
        )  # fmt: skip
    pending = Text()
    for p in state["pending"][:6]:
        pending.append(p["model"], style="bold " + colour.get(p["model"], "white"))
        pending.append(f": {p['reason']}\n")
    if len(state["pending"]) > 6:
        pending.append(f"... and {len(state['pending']) - 6} more\n", style="dim")
    pre = Text()
    for p in state["preemptions"][:4]:
        pre.append(f"{p['at'][11:19]} ", style="dim")
        pre.append(f"{p['victim']} ({p['victim_class']}) gave way to {p['for']}\n")
    right = Group(
        Panel(pending or Text("none", style="dim"), title="pending", border_style="yellow"),
        Panel(pre or Text("none yet", style="dim"), title="latest preemptions", border_style="red"),
    )
    lower = Table.grid(expand=True, padding=(0, 1))
    lower.add_column(ratio=2)
    lower.add_column(ratio=3)
    lower.add_row(Panel(models, title="models", border_style="blue"), right)
    return Group(
        header,
        Panel(fleet, title="nodes and GPUs by model (colours: see models)", border_style="blue"),
        lower,
    )


def plain_line(state: dict[str, Any], clock: str, phase: str) -> str:
    if not state["passes"]:
        return f"[{clock}] demand {phase}: waiting for the scheduler's first pass"
    t = state.get("totals") or {}
    names = [p["model"] for p in state["pending"]]
    pending = str(len(names))
    if names:
        pending += f" ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
    counts = state.get("counts") or {}
    return (
        f"[{clock}] demand {phase}: GPUs {t.get('gpus_allocated', 0)}/{t.get('gpus', 0)}, "
        f"MIG {t.get('mig_allocated', 0)}/{t.get('mig', 0)}, "
        f"replicas {sum(m['live'] for m in state['models'])}, pending {pending}, "
        f"starts {counts.get('starts', 0)}, stops {counts.get('stops', 0)}, "
        f"preemptions {counts.get('preemptions', 0)}"
    )


def _secs(s: float) -> str:
    return f"{s:.0f} s" if s >= 1 else "under 1 s"


def summary(stats: DemoStats, seconds: float, gpus_total: int) -> list[str]:
    """The demo's story in a few lines: what the figures mean, not only the figures."""
    mean = stats.pass_time_s / stats.passes if stats.passes else 0.0
    g_held, g_total, m_held, m_total = stats.peak_devices
    lines = [
        f"demo finished after {seconds:.0f} s: {stats.passes} passes (mean {mean * 1000:.0f} ms); "
        f"{stats.starts} replicas started, {stats.stops} stopped, {stats.failed} failed actions",
        f"  busiest moment: {g_held} of {g_total or gpus_total} whole GPUs and {m_held} of "
        f"{m_total} MIG slices in use; at most {stats.peak_pending} models waited for room at once",
    ]
    critical = sorted(n for n, c in stats.classes.items() if c == "critical")
    if critical:
        lines.append("  critical models:")
        for name in critical:
            waited = stats.waited_s.get(name)
            if waited is None:
                lines.append(f"    {name} never waited for room")
            else:
                longest = _secs(stats.longest_wait_s.get(name, 0.0))
                lines.append(
                    f"    {name} waited {_secs(waited)} in all, longest {longest}: "
                    f"{stats.wait_reason.get(name, '')}"
                )
    if stats.gave_way:
        lines.append(f"  preemptions ({stats.preemptions}), who gave way to whom:")
        for (victim, vc, winner, wc), n in sorted(
            stats.gave_way.items(), key=lambda kv: (-kv[1], kv[0])
        ):
            times = f" ({n} times)" if n > 1 else ""
            lines.append(f"    {victim} ({vc}) for {winner} ({wc}){times}")
    else:
        lines.append("  preemptions: none; every model that needed room found it free")
    others = sorted(
        ((n, s) for n, s in stats.waited_s.items() if stats.classes.get(n) != "critical"),
        key=lambda kv: (-kv[1], kv[0]),
    )
    if others:
        lines.append("  waited longest for room (the others):")
        for name, waited in others[:4]:
            lines.append(
                f"    {name} ({stats.classes.get(name, '?')}) {_secs(waited)}: "
                f"{stats.wait_reason.get(name, '')}"
            )
        if len(others) > 4:
            lines.append(f"    and {len(others) - 4} more: {', '.join(n for n, _ in others[4:])}")
    if stats.final_pending:
        lines.append("  still pending at the end:")
        lines += [f"    {n}: {r}" for n, r in sorted(stats.final_pending.items())]
    else:
        lines.append("  nothing pending at the end: every model had what it wanted")
    for name, reason in sorted(stats.objective_out.items()):
        met = stats.objective_met.get(name)
        lines.append(f"  latency objective: {name} {reason}")
        lines.append(f"    then met it: {met}" if met else "    not met by the end")
    lines += [f"  error: {e}" for e in stats.errors]
    return lines
