# Consul ACL policy for operators who run `llm-scheduler models apply`, `quotas apply`,
# `status` and `why`: write the catalog, read what the scheduler reports.
key_prefix "llm-scheduler/models/" {
  policy = "write"
}
key_prefix "llm-scheduler/quotas/" {
  policy = "write"
}
key "llm-scheduler/settings" {
  policy = "write"
}
key_prefix "llm-scheduler/" {
  policy = "read"
}
