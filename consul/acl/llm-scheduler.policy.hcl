# Consul ACL policy for the llm-scheduler service: least privilege.
#
#   consul acl policy create -name llm-scheduler -rules @consul/acl/llm-scheduler.policy.hcl
#   consul acl token create -description llm-scheduler -policy-name llm-scheduler
#
# Run the scheduler with CONSUL_HTTP_TOKEN=<the token's secret>. With another KV prefix
# (LLM_SCHEDULER_KV_PREFIX), change "llm-scheduler/" below to match.

# What operators and gateways write, and the GPU reporters' records: read only.
key_prefix "llm-scheduler/models/" {
  policy = "read"
}
key_prefix "llm-scheduler/quotas/" {
  policy = "read"
}
key_prefix "llm-scheduler/demand/" {
  policy = "read"
}
key_prefix "llm-scheduler/gateways/" {
  policy = "read"
}
key "llm-scheduler/settings" {
  policy = "read"
}
key_prefix "llm-scheduler/nodes/" {
  policy = "read"
}

# What the scheduler writes: status records, its leader lock, and its holds and
# preempted-for marks (llm-scheduler/state/holds).
key_prefix "llm-scheduler/status/" {
  policy = "write"
}
key "llm-scheduler/leader" {
  policy = "write"
}
key_prefix "llm-scheduler/state/" {
  policy = "write"
}

# The leader lock is held through a session on the agent's node.
session_prefix "" {
  policy = "write"
}

# Readiness: replicas are ready when their service passes its health check.
service_prefix "llm-" {
  policy = "read"
}
node_prefix "" {
  policy = "read"
}
