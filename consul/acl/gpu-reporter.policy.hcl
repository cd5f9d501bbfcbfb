# Consul ACL policy for the GPU reporter (jobspecs/gpu-reporter.nomad.hcl), one token shared by
# every GPU node:
#
#   consul acl policy create -name llm-gpu-reporter -rules @consul/acl/gpu-reporter.policy.hcl
#   consul acl token create -description llm-gpu-reporter -policy-name llm-gpu-reporter
#   nomad var put -namespace default nomad/jobs/llm-gpu-reporter consul_token=<SecretID>
#
# With another KV prefix (LLM_SCHEDULER_KV_PREFIX), change "llm-scheduler/" below to match.

# Each reporter writes (acquires) only its node's record, llm-scheduler/nodes/<node id>/gpus.
key_prefix "llm-scheduler/nodes/" {
  policy = "write"
}

# The record is held by a session with behavior=delete, so it vanishes with its node. Consul
# checks session:write on the node the session is made for (the local agent's node):
# hashicorp/consul agent/consul/session_endpoint.go, Session.Apply. Reporters run on every GPU
# node, so the rule covers all node names.
session_prefix "" {
  policy = "write"
}
