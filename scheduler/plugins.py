"""Third-party plugins through Python entry points.

Groups: `llm_scheduler.filters`, `llm_scheduler.scorers` (placement plugins handed to the
decision core), `llm_scheduler.demand_sources` (factories `(ServiceConfig) -> DemandSource`)
and `llm_scheduler.templates` (runtime name -> path of a Nomad HCL jobspec).
A plugin that fails to load is logged and skipped, never fatal.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from scheduler.core.plugins import Plugins
    from scheduler.demand import DemandSource
    from scheduler.service.config import ServiceConfig

FILTERS = "llm_scheduler.filters"
SCORERS = "llm_scheduler.scorers"
DEMAND_SOURCES = "llm_scheduler.demand_sources"
TEMPLATES = "llm_scheduler.templates"

log = structlog.get_logger("llm-scheduler.plugins")
JOBSPECS = Path(__file__).resolve().parent.parent / "jobspecs"


def load_group(group: str) -> dict[str, Any]:
    loaded: dict[str, Any] = {}
    for ep in entry_points(group=group):
        try:
            loaded[ep.name] = ep.load()
        except Exception as exc:  # a broken third-party plugin must not stop the service
            log.warning("plugin_load_failed", group=group, name=ep.name, error=str(exc))
    return loaded


def placement_plugins() -> Plugins | None:
    """Filters and scorers from entry points (each an object or a class to instantiate), or
    None when there are none: the core then runs its built-in pipeline alone."""
    from scheduler.core.plugins import Plugins

    def _instances(group: str) -> list[Any]:
        return [p() if isinstance(p, type) else p for p in load_group(group).values()]

    filters, scorers = _instances(FILTERS), _instances(SCORERS)
    if not filters and not scorers:
        return None
    return Plugins(filters=filters, scorers=scorers)


def demand_source(config: ServiceConfig) -> DemandSource:
    from scheduler.demand.kv import KVDemandSource
    from scheduler.demand.prometheus import PrometheusDemandSource

    name = config.demand_source
    if name == "consul":
        return KVDemandSource()
    if name == "prometheus":
        return PrometheusDemandSource(config.prometheus_url)
    factories = load_group(DEMAND_SOURCES)
    if name not in factories:
        known = ", ".join(sorted({"consul", "prometheus", *factories}))
        raise ValueError(f"unknown demand source {name!r}; known: {known}")
    source: DemandSource = factories[name](config)
    return source


def template_path(runtime: str, jobspec_dir: str | None = None) -> Path | None:
    """The HCL jobspec for a model's `runtime`: jobspec_dir, then plugins, then jobspecs/."""
    if jobspec_dir:
        candidate = Path(jobspec_dir) / f"{runtime}.nomad.hcl"
        if candidate.is_file():
            return candidate
    extra = load_group(TEMPLATES)
    if runtime in extra:
        return Path(str(extra[runtime]))
    candidate = JOBSPECS / f"{runtime}.nomad.hcl"
    return candidate if candidate.is_file() else None
