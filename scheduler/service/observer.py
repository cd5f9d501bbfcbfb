"""The seam through which metrics and the demo watch the service, without the loop knowing them."""

from __future__ import annotations

from typing import Protocol

from scheduler.core.models import Plan, Snapshot, StartAction, StopAction


class PassObserver(Protocol):
    """An observer may also have `pass_carried(duration_s, input_errors)`, called for a pass
    carried over (carry.py: the last snapshot and plan stand); one without it gets
    pass_finished with the last snapshot, at the carried pass's time."""

    def pass_finished(
        self, snapshot: Snapshot, plan: Plan, duration_s: float, input_errors: list[str]
    ) -> None: ...

    def action_done(
        self, action: StartAction | StopAction, ok: bool, error: str | None
    ) -> None: ...
