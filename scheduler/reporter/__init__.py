"""The per-node GPU reporter: reads NVML, writes one JSON record per node to Consul KV under a
session, so a dead node's record disappears. See scheduler/commands/reporter.py."""
