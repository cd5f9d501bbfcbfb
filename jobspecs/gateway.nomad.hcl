# The gateway (`llm-scheduler gateway`) on Nomad: the OpenAI-compatible entry point in front
# of the scheduler's models. Several instances, each counting its own demand under its own
# Consul session; put a load balancer (or Consul DNS, llm-gateway.service.consul) in front.
#
#   nomad var put -namespace llm nomad/jobs/llm-gateway \
#     consul_token=<secret of the Consul token with consul/acl/llm-gateway.policy.hcl>
#   nomad job run -var consul_addr=http://127.0.0.1:8500 jobspecs/gateway.nomad.hcl
#
# It needs no GPU. The task shares the host's network, so 127.0.0.1 is the node's own Consul
# agent, and it dials replicas at the addresses Consul lists for them.

variable "namespace" {
  type        = string
  default     = "llm"
  description = "Nomad namespace of this job"
}

variable "consul_addr" {
  type        = string
  default     = "http://127.0.0.1:8500"
  description = "Consul HTTP address as seen from the node (the task uses the host network)"
}

variable "image" {
  type        = string
  default     = "ghcr.io/example/llm-scheduler:0.1.0"
  description = "Container image with llm-scheduler installed (pip install llm-scheduler)"
}

variable "count" {
  type        = number
  default     = 2
  description = "Gateway instances (2 or more: one node's loss leaves the others serving)"
}

job "llm-gateway" {
  namespace = var.namespace
  type      = "service"
  priority  = 80

  constraint {
    attribute = "${node.class}"
    operator  = "!="
    value     = "gpu"
  }

  group "gateway" {
    count = var.count

    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    network {
      mode = "host"
      port "http" {}
    }

    # Clients reach it through Consul; the check is the gateway's own /healthz (503 until
    # the catalog is read and while draining).
    service {
      name     = "llm-gateway"
      port     = "http"
      provider = "consul"
      tags     = ["openai", "metrics"]

      check {
        type     = "http"
        path     = "/healthz"
        interval = "5s"
        timeout  = "2s"
      }
    }

    restart {
      attempts = 5
      interval = "5m"
      delay    = "5s"
      mode     = "delay"
    }

    task "gateway" {
      driver = "docker"

      config {
        image        = var.image
        args         = ["gateway", "--json", "--host", "0.0.0.0", "--port", "${NOMAD_PORT_http}"]
        network_mode = "host"
        ports        = ["http"]
      }

      env {
        CONSUL_HTTP_ADDR = var.consul_addr
        # One demand key per allocation: a replacement is a new instance, never a re-acquire.
        LLM_SCHEDULER_GATEWAY_INSTANCE        = "${NOMAD_ALLOC_ID}"
        LLM_SCHEDULER_GATEWAY_DRAIN_TIMEOUT_S = "25"
      }

      template {
        data        = <<-EOT
          {{ if nomadVarExists "nomad/jobs/llm-gateway" }}{{ with nomadVar "nomad/jobs/llm-gateway" }}
          {{ with .consul_token }}CONSUL_HTTP_TOKEN={{ . }}{{ end }}
          {{ end }}{{ end }}
        EOT
        destination = "secrets/tokens.env"
        env         = true
      }

      # SIGTERM: stop accepting, finish what is in flight (drain timeout above), destroy
      # the demand session; kill_timeout leaves room for it.
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      resources {
        cpu    = 1000
        memory = 512
      }
    }
  }
}
