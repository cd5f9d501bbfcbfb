"""Making the Nomad job of a start, in one place.

In order: the runtime's template is looked up (the operator's jobspec_dir, then a
`llm_scheduler.templates` plugin, then the one shipped in scheduler/data/jobspecs/), given its
variables (template_variables) and parsed by Nomad's /v1/jobs/parse (cached per template
text and variables); then nomad_jobs.build_job gives it its shape, with each shard's argv from
scheduler/serving/argv.py. The actuator calls `JobMaker.make` once per start.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from scheduler.adapters.entry_points import load_group
from scheduler.adapters.model_cache_mount import DEFAULT_VOLUME
from scheduler.adapters.nomad_api import NomadAPI, NomadError
from scheduler.adapters.nomad_jobs import build_job, template_variables
from scheduler.adapters.prefetch_jobs import TEMPLATE as PREFETCH_TEMPLATE
from scheduler.adapters.prefetch_jobs import build_prefetch_job
from scheduler.core.models import Model, Node, StartAction
from scheduler.serving.argv import RenderError

TEMPLATES = "llm_scheduler.templates"  # entry points: runtime name -> path of a jobspec


class TemplateError(Exception):
    """A runtime's jobspec template is missing or unreadable."""


class ModelUnservable(Exception):
    """The model's job cannot be made (missing or broken template, unrenderable serve spec):
    permanent until the catalog or the template changes, so it is retried only with backoff."""


class JobMaker:
    """The job to register for a start: template, variables, Nomad's parse, argv, shape."""

    def __init__(
        self,
        nomad: NomadAPI,
        *,
        namespace: str | None,
        images: dict[str, str],
        jobspec_dir: str | None = None,
        model_cache_volume: str = DEFAULT_VOLUME,
    ) -> None:
        self.nomad = nomad
        self.model_cache_volume = model_cache_volume  # the host volume the shards mount
        self.namespace = namespace
        self.images = images  # runtime -> the image a model that names none runs
        self.jobspec_dir = jobspec_dir
        self._parsed: dict[str, dict[str, Any]] = {}

    def make(
        self, model: Model, action: StartAction, nodes: dict[str, Node], created_at: datetime
    ) -> dict[str, Any]:
        """The job to register for `action`. ModelUnservable when the model's job cannot be
        made as the catalog stands; JobShapeError when this placement cannot be written;
        NomadError when Nomad could not parse the template for reasons of its own."""
        template = self.template(model)
        try:
            return build_job(
                template,
                model,
                action,
                nodes,
                created_at,
                self.namespace,
                cache_volume=self.model_cache_volume,
            )
        except RenderError as exc:
            raise ModelUnservable(str(exc)) from exc

    def make_prefetch(self, model: Model, node: Node, created_at: datetime) -> dict[str, Any]:
        """The prefetch job of `model` on `node` (prefetch_jobs.py): the prefetch template,
        parsed with the model's image. ModelUnservable and JobShapeError as for `make`."""
        template = self.template(model, PREFETCH_TEMPLATE)
        return build_prefetch_job(
            template, model, node, created_at, self.namespace, self.model_cache_volume
        )

    def template(self, model: Model, name: str | None = None) -> dict[str, Any]:
        """The parsed template `name` (default: the model's runtime's) with the model's image;
        ModelUnservable when there is none, it does not parse, or the model says nothing
        about what to serve."""
        if model.serve is None:
            raise ModelUnservable("serve: missing; the model says nothing about what to serve")
        runtime = model.serve.runtime
        image = model.serve.image or self.images.get(runtime, "")
        try:
            origin, text = template_text(name or runtime, self.jobspec_dir)
        except TemplateError as exc:
            raise ModelUnservable(str(exc)) from exc
        variables = template_variables(model, image)
        key = hashlib.sha256(f"{origin}\0{text}\0{variables}".encode()).hexdigest()
        cached = self._parsed.get(key)
        if cached is None:
            try:
                cached = self.nomad.parse(text, variables)
            except NomadError as exc:
                if exc.status is not None and 400 <= exc.status < 500:
                    raise ModelUnservable(f"template {origin}: {exc}") from exc
                raise  # Nomad unreachable or failing: not the template's fault
            self._parsed[key] = cached
        return cached


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
