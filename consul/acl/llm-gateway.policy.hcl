# Consul ACL policy for `llm-scheduler gateway` (jobspecs/gateway.nomad.hcl): least privilege.
#
#   consul acl policy create -name llm-gateway -rules @consul/acl/llm-gateway.policy.hcl
#   consul acl token create -description llm-gateway -policy-name llm-gateway
#   nomad var put -namespace default nomad/jobs/llm-gateway consul_token=<SecretID>
#
# With another KV prefix (LLM_SCHEDULER_GATEWAY_KV_PREFIX), change "llm-scheduler/" below.

# The catalog (model names, activation_timeout_s, max_queued) and the scheduler's statuses
# (why a model that cannot be placed is refused at once): read only.
key_prefix "llm-scheduler/models/" {
  policy = "read"
}
key_prefix "llm-scheduler/status/" {
  policy = "read"
}

# Each instance writes (acquires) only its own demand key, llm-scheduler/gateways/<instance>.
key_prefix "llm-scheduler/gateways/" {
  policy = "write"
}

# The demand key is held by a session with Behavior=delete, so it vanishes with the instance.
# Consul checks session:write on the node the session is made for (the local agent's node).
session_prefix "" {
  policy = "write"
}

# The replicas: /v1/health/service/llm-* (Consul filters health entries by service:read on
# the service and node:read on its node).
service_prefix "llm-" {
  policy = "read"
}
node_prefix "" {
  policy = "read"
}
