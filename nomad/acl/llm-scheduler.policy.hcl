# Nomad ACL policy for the llm-scheduler service: least privilege.
#
#   nomad namespace apply -description "LLM replicas" llm
#   nomad acl policy apply -description "llm-scheduler" llm-scheduler nomad/acl/llm-scheduler.policy.hcl
#   nomad acl token create -name llm-scheduler -policy llm-scheduler -type client
#
# Run the scheduler with NOMAD_NAMESPACE=llm and NOMAD_TOKEN=<the token's secret>.

# Its own namespace only: register and deregister replica jobs (submit-job), read them,
# their allocations and evaluations (read-job), list them (list-jobs), and parse the
# HCL templates through /v1/jobs/parse (parse-job).
namespace "llm" {
  capabilities = ["submit-job", "read-job", "list-jobs", "parse-job"]
}

# Every other namespace: read only, for one `GET /v1/allocations?namespace=*&resources=true`
# per pass. Capacity is each node's resources less its reserved resources and less every
# allocation on it, whatever its namespace; Nomad silently leaves out the namespaces a token
# cannot read, and their GPUs would look free (placements then refused, see operating.md).
# The exact "llm" block above wins for its own namespace.
namespace "*" {
  capabilities = ["read-job"]
}

# Nodes and their fingerprinted devices, to know the GPUs. Read only: it never drains
# or changes eligibility.
node {
  policy = "read"
}
