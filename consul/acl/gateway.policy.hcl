# Consul ACL policy for gateways that report demand (inflight, queued, last_used).
key_prefix "llm-scheduler/demand/" {
  policy = "write"
}
