"""What the demo shows: a rich live view for a terminal, plain lines otherwise, and a summary."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from scheduler.core.models import Plan, Snapshot, StartAction, StopAction
from scheduler.ops.inventory import usage

PALETTE = [
    "red", "green", "yellow", "blue", "magenta", "cyan", "bright_red", "bright_green",
    "bright_yellow", "bright_blue", "bright_magenta", "bright_cyan", "orange3", "purple",
]  # fmt: skip


@dataclass
class DemoStats:
    """A PassObserver that keeps the numbers of the final summary."""

    passes: int = 0
    pass_time_s: float = 0.0
    peak_pending: int = 0
    max_utilisation: float = 0.0
    max_gpus_allocated: int = 0
    starts: int = 0
    stops: int = 0
    preemptions: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def pass_finished(
        self, snapshot: Snapshot, plan: Plan, duration_s: float, input_errors: list[str]
    ) -> None:
        use = usage(snapshot)
        with self._lock:
            self.passes += 1
            self.pass_time_s += duration_s
            self.peak_pending = max(
                self.peak_pending, sum(1 for s in plan.models.values() if s.pending)
            )
            self.max_utilisation = max(self.max_utilisation, use.gpu_utilisation)
            self.max_gpus_allocated = max(self.max_gpus_allocated, use.gpus_allocated)

    def action_done(self, action: StartAction | StopAction, ok: bool, error: str | None) -> None:
        with self._lock:
            if not ok:
                self.failed += 1
                if error and len(self.errors) < 5:
                    self.errors.append(f"{action.op} {action.model}: {error}")
            elif action.op == "start":
                self.starts += 1
            else:
                self.stops += 1
                self.preemptions += bool(action.preempted_for)


def colours(models: list[str]) -> dict[str, str]:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(sorted(models))}


def _cell(holder: str | None, state: str | None, colour: dict[str, str], label: str) -> Text:
    if holder is None:
        return Text("░" * len(label), style="grey35")
    style = colour.get(holder, "white")
    return Text(label, style=f"bold {style}" + (" dim" if state == "stopping" else ""))


def render(state: dict[str, Any], clock: str, phase: str, dashboard_url: str | None) -> Group:
    names = [m["name"] for m in state["models"]]
    colour = colours(names)
    totals = state.get("totals") or {}
    header = Text.assemble(
        ("llm-scheduler demo ", "bold"), (f"{clock}  ", "cyan"), (f"demand {phase}  ", "yellow"),
        f"GPUs {totals.get('gpus_allocated', 0)}/{totals.get('gpus', 0)}  ",
        f"MIG {totals.get('mig_allocated', 0)}/{totals.get('mig', 0)}  ",
        f"passes {state['passes']}",
        (f"  dashboard {dashboard_url}/" if dashboard_url else "", "dim"),
    )  # fmt: skip
    fleet = Table.grid(padding=(0, 1))
    fleet.add_column(style="bold", no_wrap=True)
    fleet.add_column()
    for node in sorted(state["nodes"], key=lambda n: n["name"]):
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
    models = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("model", "class", "live/desired"):
        models.add_column(col, no_wrap=True)
    for m in state["models"]:
        desired = m["desired"] if m["desired"] is not None else "-"
        short = m["desired"] is not None and m["live"] < m["desired"]
        models.add_row(
            Text(m["name"], style=colour[m["name"]]), m["class"],
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


def summary(stats: DemoStats, seconds: float, gpus_total: int) -> list[str]:
    mean = stats.pass_time_s / stats.passes if stats.passes else 0.0
    lines = [
        f"demo finished after {seconds:.0f} s: {stats.passes} passes (mean {mean * 1000:.0f} ms)",
        f"  starts {stats.starts}, stops {stats.stops}, preemptions {stats.preemptions}, "
        f"failed actions {stats.failed}",
        f"  peak pending models {stats.peak_pending}",
        f"  max GPU utilisation {stats.max_utilisation:.0%} "
        f"(at most {stats.max_gpus_allocated} of {gpus_total} whole GPUs)",
    ]
    lines += [f"  error: {e}" for e in stats.errors]
    return lines
