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

# Nodes and their fingerprinted devices, to know the GPUs. Read only: it never drains
# or changes eligibility.
node {
  policy = "read"
}
