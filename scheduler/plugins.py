"""Third-party plugins through Python entry points.

Groups: `llm_scheduler.filters`, `llm_scheduler.scorers` (placement plugins handed to the
decision core), `llm_scheduler.demand_sources` (factories `(ServiceConfig) -> DemandSource`)
and `llm_scheduler.templates` (runtime name -> path of a Nomad HCL jobspec).
A plugin that fails to load is logged and skipped, never fatal.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from scheduler.core.plugins import Plugins
    from scheduler.demand import DemandSource
    from scheduler.demand.signals import SignalSource
    from scheduler.service.config import ServiceConfig

FILTERS = "llm_scheduler.filters"
SCORERS = "llm_scheduler.scorers"
DEMAND_SOURCES = "llm_scheduler.demand_sources"
TEMPLATES = "llm_scheduler.templates"

log = structlog.get_logger("llm-scheduler.plugins")


class TemplateError(Exception):
    """A runtime's jobspec template is missing or unreadable."""


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

    filters = [_declared(f) for f in _instances(FILTERS)]
    scorers = _instances(SCORERS)
    if not filters and not scorers:
        return None
    return Plugins(filters=filters, scorers=scorers)


class _Dynamic:
    """A third-party filter that does not declare `static`: asked on every visit, which is
    right whatever it reads (a static one would only be asked less often)."""

    static = False

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = str(getattr(inner, "name", type(inner).__name__))

    def filter(self, ctx: Any, node: Any, choice: Any) -> str | None:
        result: str | None = self.inner.filter(ctx, node, choice)
        return result


def _declared(f: Any) -> Any:
    """The filter as the core's Filter protocol has it: `static` declared as a bool."""
    if isinstance(getattr(f, "static", None), bool):
        return f
    log.warning("plugin_static_undeclared", name=getattr(f, "name", type(f).__name__))
    return _Dynamic(f)


def signal_source(config: ServiceConfig) -> SignalSource | None:
    """Where the model servers' own metrics come from (issue 18), or None."""
    from scheduler.demand.prometheus import PrometheusSignals
    from scheduler.demand.signals import ScrapeSignals

    if config.demand_source == "prometheus" or config.signals == "prometheus":
        window = f"{max(int(config.signal_window_s), 1)}s"
        return PrometheusSignals(config.prometheus_url, window=window)
    if config.signals == "scrape":
        return ScrapeSignals(
            concurrency=config.scrape_concurrency,
            timeout_s=config.scrape_timeout_s,
            window_s=config.signal_window_s,
        )
    return None


def demand_source(config: ServiceConfig) -> DemandSource:
    from scheduler.demand.kv import KVDemandSource

    name = config.demand_source
    # The servers' metrics are signals now (signal_source), read next to the gateway's demand.
    if name in ("consul", "prometheus"):
        return KVDemandSource()
    factories = load_group(DEMAND_SOURCES)
    if name not in factories:
        known = ", ".join(sorted({"consul", "prometheus", *factories}))
        raise ValueError(f"unknown demand source {name!r}; known: {known}")
    source: DemandSource = factories[name](config)
    return source


@cache
def _template_plugins() -> dict[str, Any]:
    """Template entry points, scanned once: a scan of every installed distribution costs
    milliseconds, too much for each start (the files they name are still read each time)."""
    return load_group(TEMPLATES)


def template_text(runtime: str, jobspec_dir: str | None = None) -> tuple[str, str]:
    """(where it came from, HCL text) of the jobspec for `runtime`: the operator's
    jobspec_dir wins, then a `llm_scheduler.templates` plugin, then the one shipped inside
    the package (scheduler/data/jobspecs/, read through importlib.resources so a wheel
    install finds it). TemplateError when none is found or it cannot be read."""
    name = f"{runtime}.nomad.hcl"
    try:
        if jobspec_dir:
            candidate = Path(jobspec_dir) / name
            if candidate.is_file():
                return str(candidate), candidate.read_text(encoding="utf-8")
        extra = _template_plugins()
        if runtime in extra:
            path = Path(str(extra[runtime]))
            return str(path), path.read_text(encoding="utf-8")
        shipped = resources.files("scheduler") / "data" / "jobspecs" / name
        if shipped.is_file():
            return f"scheduler/data/jobspecs/{name}", shipped.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TemplateError(f"jobspec template for runtime {runtime!r} unreadable: {exc}") from exc
    where = f" in {jobspec_dir} or" if jobspec_dir else ""
    raise TemplateError(f"no jobspec template for runtime {runtime!r}{where} in the package")
