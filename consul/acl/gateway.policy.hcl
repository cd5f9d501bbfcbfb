# Consul ACL policy for other demand writers (a sidecar or a gateway of your own) that write
# the single llm-scheduler/demand/<model> keys (inflight, queued, last_used). The project's
# own gateway writes per-instance keys instead: consul/acl/llm-gateway.policy.hcl.
key_prefix "llm-scheduler/demand/" {
  policy = "write"
}
