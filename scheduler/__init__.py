"""llm-scheduler: places LLM replicas on the GPUs of a Nomad + Consul cluster."""

__version__ = "0.1.0"
