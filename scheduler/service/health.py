"""What /healthz answers for a service."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.service.loop import Service


def health_report(service: Service) -> dict[str, Any]:
    """What /healthz answers: ok, the reasons it is not, and whether this instance leads."""
    now = time.monotonic()
    reasons: list[str] = []
    if service.failures_in_a_row >= service.config.unhealthy_after_failures:
        reasons.append(
            f"{service.failures_in_a_row} passes in a row failed: {service.last_failure}"
        )
    stale_after = 2 * service.config.http_timeout(service.config.watch_wait_s)
    for watch in service.watches:
        stale = watch.stale_for(now)
        if stale > stale_after:
            reasons.append(f"watch {watch.name} stale for {stale:.0f} s: {watch.last_error}")
    quiet = now - service._last_pass_end
    if service._running and quiet > 3 * service.config.pass_interval_s + stale_after:
        reasons.append(f"no pass finished for {quiet:.0f} s")
    return {
        "ok": not reasons,
        "reasons": reasons,
        "leader": service.leader.is_leader,
        "passes": service.passes,
        "failed_passes": service.pass_failures,
        "failures_in_a_row": service.failures_in_a_row,
        # Not a reason to restart the scheduler (a plugin's bug stays); reported as it is.
        "plugins_failing": service.plugins_failing,
        "last_pass_age_s": round(quiet, 3),
    }
