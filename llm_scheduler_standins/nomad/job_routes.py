"""The Nomad stand-in's /v1/jobs (list, register, parse), /v1/job/<id> and its allocations,
evaluations, summary and deployments, /v1/deployment/<id>.

Handlers of NomadStandin (server.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from llm_scheduler_standins.nomad.hcl import HclError, parse_job
from llm_scheduler_standins.nomad.http_helpers import (
    HttpError,
    found,
    json_body,
    json_response,
    namespace_of,
    token_of,
)
from llm_scheduler_standins.nomad.job_store import CasError
from llm_scheduler_standins.nomad.jobs import JobDecodeError, JobValidationError
from llm_scheduler_standins.nomad.query import compile_filter, parse_bool

if TYPE_CHECKING:
    from llm_scheduler_standins.nomad.server import NomadStandin


async def jobs(server: NomadStandin, request: Request) -> Response:
    namespace = namespace_of(request)
    server._check_ns(request, "list-jobs", None if namespace == "*" else namespace)
    params = request.query_params
    prefix = params.get("prefix") or ""
    meta = parse_bool(params, "meta")
    keep = compile_filter(params.get("filter"))

    def compute() -> list[dict[str, Any]]:
        return [s for s in server.cluster.job_stubs(namespace, prefix, meta=meta) if keep(s)]

    return await server._blocking(request, ("jobs", "allocs", "evals"), compute)


async def register(server: NomadStandin, request: Request) -> Response:
    body = await json_body(request)
    if not isinstance(body, dict) or not body.get("Job"):
        raise HttpError(400, "Job must be specified")
    job = body["Job"]
    if not isinstance(job, dict):
        raise HttpError(400, "json: cannot unmarshal into Go struct field of type api.Job")
    path_id = request.path_params.get("job_id")
    if path_id is not None:
        if not job.get("ID"):
            raise HttpError(400, "Job ID hasn't been provided")
        if job["ID"] != path_id:
            raise HttpError(400, "Job ID does not match name")
    namespace = job.get("Namespace") or namespace_of(request)
    server._check_ns(request, "submit-job", namespace)
    try:
        result = server.cluster.register(
            job,
            enforce_index=bool(body.get("EnforceIndex")),
            job_modify_index=int(body.get("JobModifyIndex") or 0),
            namespace=namespace,
        )
    except (JobValidationError, CasError) as exc:
        raise HttpError(500, str(exc)) from exc
    except JobDecodeError as exc:
        raise HttpError(400, str(exc)) from exc
    return json_response(result, result["Index"])


async def parse(server: NomadStandin, request: Request) -> Response:
    body = await json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("JobHCL"), str):
        raise HttpError(400, "Job must be specified")
    if server.acl is not None:
        token = server.acl.token(token_of(request))
        if token is None:
            raise HttpError(403, "ACL token not found")
        ns = namespace_of(request)
        if not (token.allows("parse-job", ns) or token.allows("submit-job", ns)):
            raise HttpError(403, "Permission denied")
    variables = body.get("Variables") or ""
    if not isinstance(variables, str):
        raise HttpError(400, "Variables must be a string of HCL assignments")
    try:
        job = parse_job(
            body["JobHCL"],
            variables=variables,
            canonicalize=bool(body.get("Canonicalize")),
            region=server.region,
        )
    except HclError as exc:
        raise HttpError(400, f"Failed to parse job: {exc}") from exc
    return json_response(job)


def job_or_404(server: NomadStandin, request: Request) -> tuple[str, str]:
    namespace = namespace_of(request)
    job_id = request.path_params["job_id"]
    if server.cluster.job(namespace, job_id) is None:
        raise HttpError(404, "job not found")
    return namespace, job_id


async def job(server: NomadStandin, request: Request) -> Response:
    server._check_ns(request, "read-job")
    namespace, job_id = server._job_or_404(request)
    return await server._blocking(
        request, ("jobs",), lambda: found(server.cluster.job(namespace, job_id), "job not found")
    )


async def job_summary(server: NomadStandin, request: Request) -> Response:
    server._check_ns(request, "read-job")
    namespace, job_id = server._job_or_404(request)

    def compute() -> Any:
        return server.cluster.job_summary(namespace, job_id)

    return await server._blocking(request, ("jobs", "allocs", "evals"), compute)


async def deregister(server: NomadStandin, request: Request) -> Response:
    namespace = namespace_of(request)
    server._check_ns(request, "submit-job", namespace)
    purge = parse_bool(request.query_params, "purge")
    result = server.cluster.deregister(namespace, request.path_params["job_id"], purge=purge)
    return json_response(result, result["EvalCreateIndex"] or server.cluster.table_index("jobs"))


async def job_allocs(server: NomadStandin, request: Request) -> Response:
    server._check_ns(request, "read-job")
    namespace = namespace_of(request)
    job_id = request.path_params["job_id"]
    return await server._blocking(
        request,
        ("allocs",),
        lambda: server.cluster.alloc_stubs(namespace=namespace, job_id=job_id),
    )


async def job_evals(server: NomadStandin, request: Request) -> Response:
    server._check_ns(request, "read-job")
    namespace = namespace_of(request)
    job_id = request.path_params["job_id"]
    return await server._blocking(
        request,
        ("evals",),
        lambda: server.cluster.evaluations(namespace=namespace, job_id=job_id),
    )


async def job_deps(server: NomadStandin, request: Request) -> Response:
    server._check_ns(request, "read-job")
    namespace, job_id = server._job_or_404(request)
    return await server._blocking(
        request,
        ("deployments",),
        lambda: server.cluster.deployments(namespace=namespace, job_id=job_id),
    )


async def job_dep(server: NomadStandin, request: Request) -> Response:
    """The latest deployment, or null (nomad/job_endpoint.go LatestDeployment)."""
    server._check_ns(request, "read-job")
    namespace, job_id = server._job_or_404(request)

    def latest() -> Any:
        found = server.cluster.deployments(namespace=namespace, job_id=job_id)
        return found[0] if found else None

    return await server._blocking(request, ("deployments",), latest)


async def deployment(server: NomadStandin, request: Request) -> Response:
    dep_id = request.path_params["dep_id"]
    dep = server.cluster.deployment(dep_id)
    if dep is None:
        raise HttpError(404, "deployment not found")
    server._check_ns(request, "read-job", dep["Namespace"])
    return await server._blocking(
        request,
        ("deployments",),
        lambda: found(server.cluster.deployment(dep_id), "deployment not found"),
    )
