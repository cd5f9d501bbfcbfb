"""A model as the catalog holds it: the core's Model plus what it takes to really serve it.

The decision core (and `plan --snapshot`) accepts models without `serve`. What operators write
(Consul KV `models/<name>`, `models apply`) must say what to serve, with extra flags that the
runtime accepts: checked here, outside the core, since it reads the shipped flag lists.
"""

from __future__ import annotations

from pydantic import model_validator
from pydantic.dataclasses import dataclass

from scheduler.core.contract_base import STRICT_RECORD
from scheduler.core.models import Model
from scheduler.core.serve_spec import Serve
from scheduler.serving.flags import flag_problems


@dataclass(frozen=True, slots=True, kw_only=True, config=STRICT_RECORD)
class CatalogModel(Model):
    serve: Serve  # required here

    @model_validator(mode="after")
    def _flags_the_runtime_accepts(self) -> CatalogModel:
        problems = flag_problems(self.serve.runtime, list(self.serve.extra_args))
        if problems:
            raise ValueError("; ".join(f"serve.extra_args.{flag}: {why}" for flag, why in problems))
        return self
