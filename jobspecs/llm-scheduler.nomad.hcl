# The llm-scheduler service itself, on Nomad. Two instances: one leader (Consul lock on
# llm-scheduler/leader), one standby that takes over within the session TTL + lock-delay.
#
#   nomad var put -namespace llm nomad/jobs/llm-scheduler \
#     consul_token=<secret of the Consul token with consul/acl/llm-scheduler.policy.hcl> \
#     nomad_token=<secret of the Nomad token with nomad/acl/llm-scheduler.policy.hcl>
#   nomad job run -var consul_addr=http://127.0.0.1:8500 jobspecs/llm-scheduler.nomad.hcl
#
# It needs no GPU: it runs on any client of the non-GPU class.

variable "namespace" {
  type        = string
  default     = "llm"
  description = "Nomad namespace of the replica jobs (and of this job)"
}

variable "consul_addr" {
  type        = string
  default     = "http://127.0.0.1:8500"
  description = "Consul HTTP address as seen from the node"
}

variable "nomad_addr" {
  type        = string
  default     = "http://127.0.0.1:4646"
  description = "Nomad HTTP address as seen from the node"
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

    network {
      port "ops" {
        to = 9464
      }
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
        image = var.image
        args  = ["run", "--log-format", "json"]
        ports = ["ops"]
      }

      env {
        CONSUL_HTTP_ADDR            = var.consul_addr
        NOMAD_ADDR                  = var.nomad_addr
        NOMAD_NAMESPACE             = var.namespace
        # Inside the container, listen on all interfaces; the port is mapped by Nomad.
        LLM_SCHEDULER_LISTEN_ADDR   = "0.0.0.0:9464"
        LLM_SCHEDULER_LOG_FORMAT    = "json"
        OTEL_EXPORTER_OTLP_ENDPOINT = var.otlp_endpoint
        OTEL_SERVICE_NAME           = "llm-scheduler"
      }

      # Tokens come from a Nomad variable, never from the jobspec.
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/llm-scheduler" }}
          CONSUL_HTTP_TOKEN={{ .consul_token }}
          NOMAD_TOKEN={{ .nomad_token }}
          {{ end }}
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
