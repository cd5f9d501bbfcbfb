# GPU reporter: one allocation on every GPU node (a system job). It reads the GPUs through
# NVML every few seconds and keeps llm-scheduler/nodes/<nomad node id>/gpus in Consul KV,
# held by a session with a TTL and behavior=delete, so a dead node's record disappears.
#
#   nomad job run -var consul_addr=http://127.0.0.1:8500 jobspecs/gpu-reporter.nomad.hcl
#
# raw_exec runs on the host, where the NVIDIA driver's libnvidia-ml.so.1 lives; enable it on
# the GPU clients (plugin "raw_exec" { config { enabled = true } }). A node without the driver
# makes the task exit 1 with one sentence in its stderr ("NVML is not available on this node").
# For a Docker variant: driver = "docker", image with llm-scheduler installed,
# runtime = "nvidia" and env NVIDIA_VISIBLE_DEVICES = "all" (so NVML sees every GPU).

variable "consul_addr" {
  type        = string
  default     = "http://127.0.0.1:8500"
  description = "Consul HTTP address as seen from the node (CONSUL_HTTP_ADDR)"
}

variable "gpu_node_class" {
  type        = string
  default     = "^gpu"
  description = "Regexp on node.class that selects the GPU clients"
}

variable "command" {
  type        = string
  default     = "/opt/llm-scheduler/bin/llm-scheduler"
  description = "Path of the llm-scheduler executable on the nodes"
}

variable "model_cache_path" {
  type        = string
  default     = ""
  description = "The model-cache host volume's path on the nodes (static host_volume); empty: none"
}

variable "interval_s" {
  type    = number
  default = 5
}

variable "ttl_s" {
  type    = number
  default = 15
}

job "llm-gpu-reporter" {
  type     = "system"
  priority = 80

  # Nomad's NVIDIA device plugin exposes no node attribute for "has GPUs", so GPU clients are
  # picked by node class. Alternatively constrain on client meta, e.g. ${meta.gpu} = "true".
  constraint {
    attribute = "${node.class}"
    operator  = "regexp"
    value     = var.gpu_node_class
  }

  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  group "reporter" {
    restart {
      attempts = 3
      interval = "5m"
      delay    = "15s"
      mode     = "delay"
    }

    task "reporter" {
      driver = "raw_exec"

      config {
        command = var.command
        args = [
          "reporter",
          "--node-id", "${node.unique.id}",
          "--interval", "${var.interval_s}",
          "--ttl", "${var.ttl_s}",
        ]
      }

      env {
        CONSUL_HTTP_ADDR      = var.consul_addr
        LLM_SCHEDULER_NODE_ID = "${node.unique.id}"
        # Its complete snapshots and free bytes are reported next to the GPUs (raw_exec
        # reads the host path; the volume is not requested, so nodes without it still run).
        LLM_SCHEDULER_MODEL_CACHE = var.model_cache_path
      }

      # The Consul token, if ACLs are on: a Nomad variable at nomad/jobs/llm-gpu-reporter
      # with key consul_token (session:write and key:write on llm-scheduler/nodes/).
      # nomadVar alone blocks the task until the variable exists (template.mdx); guarded by
      # nomadVarExists, the reporter starts without it (no token: ACLs off).
      template {
        data        = <<-EOT
          {{ if nomadVarExists "nomad/jobs/llm-gpu-reporter" }}{{ with nomadVar "nomad/jobs/llm-gpu-reporter" }}{{ with .consul_token }}CONSUL_HTTP_TOKEN={{ . }}{{ end }}{{ end }}{{ end }}
        EOT
        destination = "secrets/consul.env"
        env         = true
        error_on_missing_key = false
      }

      # SIGINT lets the reporter destroy its session, which deletes the record at once.
      kill_signal  = "SIGINT"
      kill_timeout = "10s"

      resources {
        cpu    = 50
        memory = 64
      }
    }
  }
}
