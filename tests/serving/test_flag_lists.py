"""The runtime flag lists ship inside the package and equal the shared fixtures.

The fixtures were dumped from the released parsers (vLLM v0.34.0 `vllm serve`, SGLang v0.5.23
`python -m sglang.launch_server`, `parser._option_string_actions`); see
reference/serving-runtimes.md, "How the flags were derived".
"""

from __future__ import annotations

from importlib import resources

import pytest
from serving_helpers import FIXTURE_FILES, RUNTIME_FIXTURES

from scheduler.serving.flags import SCHEDULER_FLAGS, known_flags


@pytest.mark.parametrize("runtime", sorted(FIXTURE_FILES))
def test_shipped_list_equals_the_shared_fixture(runtime: str) -> None:
    shipped = resources.files("scheduler") / "data" / "runtimes" / FIXTURE_FILES[runtime]
    assert shipped.read_text() == (RUNTIME_FIXTURES / FIXTURE_FILES[runtime]).read_text()
    assert len(known_flags(runtime)) > 400


@pytest.mark.parametrize("runtime", sorted(FIXTURE_FILES))
def test_flags_the_scheduler_owns_exist_in_the_runtime(runtime: str) -> None:
    # Guards against a typo that would let the real spelling through extra_args.
    assert set(SCHEDULER_FLAGS[runtime]) <= known_flags(runtime)
