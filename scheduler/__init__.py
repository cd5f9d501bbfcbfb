"""llm-scheduler: places LLM replicas on the GPUs of a Nomad + Consul cluster."""

from scheduler import core_build as _core_build

__version__ = "0.1.0"

# The mypyc-compiled decision core when the install built it and it is current, else the
# pure-Python one (scheduler/core_build.py); chosen before anything imports the core.
CORE_BUILD, CORE_BUILD_WHY = _core_build.install()
