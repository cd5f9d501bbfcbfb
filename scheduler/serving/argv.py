"""The command line of one shard's container, following each runtime's real CLI.

vLLM (image ENTRYPOINT `vllm serve`): the model first, then flags; tensor parallel per node,
pipeline parallel across nodes, multi-node without Ray (`--nnodes/--node-rank/--master-addr/
--master-port`, ranks >= 1 `--headless`; vLLM >= 0.11.1). SGLang (image without entrypoint):
`python3 -m sglang.launch_server --model-path ...`, `--tp-size` over all nodes, `--nnodes/
--node-rank/--dist-init-addr`. Every item is its own argv element: nothing is parsed by a shell.
Sources: vLLM's `vllm/engine/arg_utils.py` and `vllm/entrypoints/cli/serve.py`
(vllm-project/vllm, v0.34), SGLang's `python/sglang/srt/server_args.py` and
`python/sglang/launch_server.py` (sgl-project/sglang, v0.5.23).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.core.models import Model, Profile
from scheduler.core.serve_spec import Serve, ServeOptions
from scheduler.serving.flags import flag_problems, known_flags

# Nomad fills these in on the client: the port it gave the task, the node's own address.
HTTP_PORT = "${NOMAD_PORT_http}"
NODE_IP = "${attr.unique.network.ip-address}"
READINESS_PATH = {"vllm": "/health", "sglang": "/health"}


class RenderError(ValueError):
    """A model whose serve spec cannot be rendered: permanent until the catalog changes."""


@dataclass(frozen=True)
class Wiring:
    """Where one shard sits in its replica: rank `rank` of `nnodes`, rendezvous at head:port."""

    rank: int = 0
    nnodes: int = 1
    head_addr: str = ""
    rdzv_port: int = 0


@dataclass(frozen=True)
class ShardCommand:
    command: str | None  # None: keep the image's ENTRYPOINT
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    serves_http: bool = True


def _options(runtime: str, opts: ServeOptions) -> list[str]:
    names = {
        "vllm": (
            "--max-model-len",
            "--gpu-memory-utilization",
            "--max-num-seqs",
        ),
        "sglang": (
            "--context-length",
            "--mem-fraction-static",
            "--max-running-requests",
        ),
    }[runtime]
    out: list[str] = []
    if opts.context_length is not None:
        out += [names[0], str(opts.context_length)]
    if opts.dtype is not None:
        out += ["--dtype", opts.dtype]
    if opts.quantization is not None:
        out += ["--quantization", opts.quantization]
    if opts.gpu_memory_fraction is not None:
        out += [names[1], repr(float(opts.gpu_memory_fraction))]
    if opts.max_concurrent_sequences is not None:
        out += [names[2], str(opts.max_concurrent_sequences)]
    if opts.trust_remote_code:
        out.append("--trust-remote-code")
    return out


def _extra(serve: Serve) -> list[str]:
    problems = flag_problems(serve.runtime, list(serve.extra_args))
    if problems:
        raise RenderError("; ".join(f"serve.extra_args.{f}: {why}" for f, why in problems))
    out: list[str] = []
    for flag in sorted(serve.extra_args):
        value = serve.extra_args[flag]
        out += [flag] if value is True else [flag, str(value)]
    return out


def _vllm(model: Model, serve: Serve, profile: Profile, w: Wiring) -> ShardCommand:
    args = [serve.source, "--served-model-name", model.name, "--host", "0.0.0.0"]
    args += ["--port", HTTP_PORT, "--tensor-parallel-size", str(profile.gpus)]
    if serve.revision:
        args += ["--revision", serve.revision]
    env = {"VLLM_ENGINE_READY_TIMEOUT_S": str(model.load_grace_s)}
    if w.nnodes > 1:
        args += ["--pipeline-parallel-size", str(w.nnodes)]
        args += ["--distributed-executor-backend", "mp", "--nnodes", str(w.nnodes)]
        args += ["--node-rank", str(w.rank), "--master-addr", w.head_addr]
        args += ["--master-port", str(w.rdzv_port)]
        if w.rank > 0:
            args.append("--headless")
        env["VLLM_HOST_IP"] = NODE_IP
    args += _options("vllm", serve.options) + _extra(serve)
    return ShardCommand(None, args, {**env, **serve.env}, serves_http=w.rank == 0)


def _sglang(model: Model, serve: Serve, profile: Profile, w: Wiring) -> ShardCommand:
    args = ["-m", "sglang.launch_server", "--model-path", serve.source]
    args += ["--served-model-name", model.name, "--host", "0.0.0.0", "--port", HTTP_PORT]
    args += ["--tp-size", str(profile.gpus * w.nnodes), "--enable-metrics"]
    if serve.revision:
        args += ["--revision", serve.revision]
    if w.nnodes > 1:
        args += ["--nnodes", str(w.nnodes), "--node-rank", str(w.rank)]
        args += ["--dist-init-addr", f"{w.head_addr}:{w.rdzv_port}"]
    args += _options("sglang", serve.options) + _extra(serve)
    return ShardCommand("python3", args, dict(serve.env), serves_http=w.rank == 0)


def shard_command(model: Model, profile: Profile, wiring: Wiring) -> ShardCommand:
    """The container command of one shard; RenderError when the model cannot be served."""
    serve = model.serve
    if serve is None:
        raise RenderError("serve: missing; the model says nothing about what to serve")
    if wiring.nnodes > 1 and (not wiring.head_addr or wiring.rdzv_port <= 0):
        raise RenderError("a multi-node replica needs its head shard's address and port")
    render = _vllm if serve.runtime == "vllm" else _sglang
    out = render(model, serve, profile, wiring)
    unknown = [a for a in out.args if a.startswith("--") and a not in known_flags(serve.runtime)]
    if unknown:  # a renderer bug, never catalog input (extra flags were checked above)
        raise RenderError(f"{serve.runtime} does not accept {', '.join(unknown)}")
    return out
