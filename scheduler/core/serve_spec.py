"""What a model serves and how: the typed `serve` object of a catalog model.

Every string here ends up as one argv item or one environment value of a GPU container. Nothing
goes through a shell, but Nomad interpolates `${...}` in task args and env, and a value that
starts with `-` reads as a flag: so each string is held to a small safe alphabet. Which flags a
runtime accepts is checked outside the core (scheduler/serving/flags.py), since it reads the
shipped flag lists.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Runtime = Literal["vllm", "sglang"]
RUNTIMES: tuple[str, ...] = ("vllm", "sglang")

# Hugging Face repo id `org/name` (HF allows [A-Za-z0-9._-], at most 96 characters a part).
_HF_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
HF_REPO = re.compile(rf"^{_HF_PART}/{_HF_PART}$")
# An absolute path inside the container (a mounted volume), no `..`.
ABS_PATH = re.compile(r"^(/[A-Za-z0-9._-]+)+/?$")
# A git revision: branch, tag or commit.
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
# A container image reference: [registry[:port]/]repo[:tag][@sha256:digest].
IMAGE = re.compile(r"^[a-z0-9][A-Za-z0-9._/:-]{0,254}(@sha256:[a-f0-9]{64})?$")
# A long flag as the fixtures spell it (dashes; vLLM also takes underscores, SGLang does not).
FLAG = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
# An extra flag's string value: no whitespace, quotes, `$`, `;`, `|`, `&`, backquotes, NUL...
VALUE = re.compile(r"^[A-Za-z0-9_./:=,+@%][A-Za-z0-9_./:=,+@%-]{0,255}$")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
ENV_VALUE = re.compile(r"^[^\x00-\x1f\x7f$`]{0,4096}$")
# Set by Nomad (device plugin, runtime) or by the scheduler: never from the catalog.
RESERVED_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
RESERVED_ENV_PREFIX = "NOMAD_"

Dtype = Literal["auto", "half", "float16", "bfloat16", "float", "float32"]
# The methods serving-runtimes.md names for SGLang's choice list; vLLM accepts each of them.
Quantization = Literal["awq", "fp8", "gptq", "modelopt_fp4", "mxfp4"]
ExtraValue = bool | int | float | str


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _no_dotdot(value: str) -> bool:
    return all(part not in ("..", ".") for part in value.split("/"))


class ServeOptions(_Strict):
    """The runtime options a scheduler operator needs most, named the same for both runtimes."""

    # vLLM --max-model-len, SGLang --context-length (tokens).
    context_length: Annotated[int, Field(ge=1, le=100_000_000)] | None = None
    dtype: Dtype | None = None
    quantization: Quantization | None = None
    # vLLM --gpu-memory-utilization, SGLang --mem-fraction-static.
    gpu_memory_fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    # vLLM --max-num-seqs, SGLang --max-running-requests.
    max_concurrent_sequences: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    trust_remote_code: bool = False


class Serve(_Strict):
    # A Hugging Face repo id (`org/name`) or an absolute path inside the container.
    source: str
    revision: str | None = None
    runtime: Runtime = "vllm"
    # Empty: the service's default image for the runtime (LLM_SCHEDULER_IMAGE_VLLM/_SGLANG).
    image: str | None = None
    options: ServeOptions = Field(default_factory=ServeOptions)
    # Further long flags of the runtime: `{"--enforce-eager": true, "--seed": 7}`. Each one is
    # checked against the runtime's flag list; true means a bare flag.
    extra_args: dict[str, ExtraValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    # The weights' size in GB, when no node's cache says it (a cached safetensors index or
    # snapshot is preferred); unknown when neither does. Not part of what a replica runs.
    weights_gb: (
        Annotated[float, Field(gt=0, le=100_000, allow_inf_nan=False, strict=True)] | None
    ) = None
    # Keep the weights on this many nodes where a replica may land, ahead of demand (prefetch
    # jobs, rules PF1-PF3). Not part of what a replica runs either.
    prefetch: Annotated[int, Field(ge=0, le=64, strict=True)] | None = None

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if HF_REPO.match(value) and ".." not in value:
            return value
        if ABS_PATH.match(value) and _no_dotdot(value):
            return value
        raise ValueError(
            f"{value!r} is neither a Hugging Face repo id (org/name, letters, digits, . _ -) "
            "nor an absolute path without '..' (no spaces or shell characters)"
        )

    @model_validator(mode="after")
    def _prefetch_needs_a_repo(self) -> Serve:
        if self.prefetch and self.source.startswith("/"):
            raise ValueError("prefetch: source is a path in the container, nothing to download")
        return self

    @field_validator("revision")
    @classmethod
    def _revision(cls, value: str | None) -> str | None:
        if value is not None and not (REVISION.match(value) and ".." not in value):
            raise ValueError(f"{value!r} is not a branch, tag or commit (letters, digits, . _ / -)")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        if value is not None and not IMAGE.match(value):
            raise ValueError(f"{value!r} is not a container image reference")
        return value

    @field_validator("extra_args")
    @classmethod
    def _extra_args(cls, args: dict[str, ExtraValue]) -> dict[str, ExtraValue]:
        for flag, value in args.items():
            if not FLAG.match(flag):
                raise ValueError(f"{flag!r}: a long flag spelled with dashes, e.g. --enforce-eager")
            if value is False:
                raise ValueError(f"{flag}: false is not a value; leave the flag out")
            if isinstance(value, str) and not VALUE.match(value):
                raise ValueError(
                    f"{flag}: {value!r} has characters that are not allowed in an argument "
                    "(whitespace, quotes, $ ; | & ` < > ( ) or a leading -)"
                )
        return args

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for key, value in env.items():
            if not ENV_KEY.match(key):
                raise ValueError(f"{key!r} is not an environment variable name")
            if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIX):
                raise ValueError(f"{key} is set by Nomad, not by the catalog")
            if not ENV_VALUE.match(value):
                raise ValueError(f"{key}: control characters, $ and ` are not allowed")
        return env
