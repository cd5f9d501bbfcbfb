# The llm-scheduler service itself, on Nomad. Two instances: one leader (Consul lock on
# llm-scheduler/leader), one standby that takes over within the session TTL + lock-delay.
#
#   nomad var put -namespace llm nomad/jobs/llm-scheduler \
#     consul_token=<secret of the Consul token with consul/acl/llm-scheduler.policy.hcl> \
#     nomad_token=<secret of the Nomad token with nomad/acl/llm-scheduler.policy.hcl>
#   nomad job run -var consul_addr=http://127.0.0.1:8500 jobspecs/llm-scheduler.nomad.hcl
#
# It needs no GPU: it runs on any client of the non-GPU class.
#
# Reaching Consul and Nomad: the container shares the host's network (network_mode "host"),
# so 127.0.0.1 is the node itself, where the local Consul and Nomad agents listen (both bind
# their HTTP API to 127.0.0.1 by default). With agents bound elsewhere, set consul_addr and
# nomad_addr, e.g. to http://${attr.unique.network.ip-address}:8500 (Nomad fills the node
# attribute in at run time).

variable "namespace" {
  type        = string
  default     = "llm"
  description = "Nomad namespace of the replica jobs (and of this job)"
}

variable "consul_addr" {
  type        = string
  default     = "http://127.0.0.1:8500"
  description = "Consul HTTP address as seen from the node (the task uses the host network)"
}

variable "nomad_addr" {
  type        = string
  default     = "http://127.0.0.1:4646"
  description = "Nomad HTTP address as seen from the node (the task uses the host network)"
}

variable "image" {
  type        = string
  default     = "ghcr.io/example/llm-scheduler:0.1.0"
  description = "Container image with llm-scheduler installed (pip install llm-scheduler)"
}

variable "otlp_endpoint" {
  type        = string
  default     = ""
  description = "OTLP/HTTP collector for traces (empty: tracing off)"
}

job "llm-scheduler" {
  namespace = var.namespace
  type      = "service"
  priority  = 90

  constraint {
    attribute = "${node.class}"
    operator  = "!="
    value     = "gpu"
  }

  group "scheduler" {
    count = 2

    # Two instances on different hosts, so one node's loss leaves a standby.
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    # Host networking: 127.0.0.1 is the node's own Consul and Nomad agents. The ops port is
    # a dynamic host port, which the task listens on (NOMAD_PORT_ops).
    network {
      mode = "host"
      port "ops" {}
    }

    # Prometheus scrapes /metrics; Consul checks /healthz.
    service {
      name     = "llm-scheduler"
      port     = "ops"
      provider = "consul"
      tags     = ["metrics"]

      check {
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    restart {
      attempts = 5
      interval = "5m"
      delay    = "10s"
      mode     = "delay"
    }

    task "scheduler" {
      driver = "docker"

      config {
        image        = var.image
        args         = ["run", "--log-format", "json"]
        network_mode = "host"
        ports        = ["ops"]
      }

      env {
        CONSUL_HTTP_ADDR            = var.consul_addr
        NOMAD_ADDR                  = var.nomad_addr
        NOMAD_NAMESPACE             = var.namespace
        # The host's network: listen on the port Nomad gave the task, on all interfaces.
        LLM_SCHEDULER_LISTEN_ADDR   = "0.0.0.0:${NOMAD_PORT_ops}"
        LLM_SCHEDULER_LOG_FORMAT    = "json"
        OTEL_EXPORTER_OTLP_ENDPOINT = var.otlp_endpoint
        OTEL_SERVICE_NAME           = "llm-scheduler"
      }

      # Tokens come from a Nomad variable, never from the jobspec. Guarded by nomadVarExists
      # so that a cluster without ACLs (and without the variable) still starts the task:
      # nomadVar alone blocks until the variable exists.
      template {
        data        = <<-EOT
          {{ if nomadVarExists "nomad/jobs/llm-scheduler" }}{{ with nomadVar "nomad/jobs/llm-scheduler" }}
          {{ with .consul_token }}CONSUL_HTTP_TOKEN={{ . }}{{ end }}
          {{ with .nomad_token }}NOMAD_TOKEN={{ . }}{{ end }}
          {{ end }}{{ end }}
        EOT
        destination = "secrets/tokens.env"
        env         = true
      }

      # SIGTERM lets it release the leader lock, so the standby takes over at once.
      kill_signal  = "SIGTERM"
      kill_timeout = "20s"

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
