# A vLLM replica, one task group per shard, in the shape llm-scheduler's templates use.
variable "model" {
  type    = string
  default = "llama-3-8b"
}

variable "replica" {
  type    = string
  default = "r-1"
}

variable "node_id" {
  type = string
}

variable "gpu_ids" {
  type    = string
  default = ""
}

variable "gpus" {
  type    = number
  default = 2
}

locals {
  service = "llm-${var.model}"
}

job "llm" {
  datacenters = ["*"]
  type        = "service"
  priority    = 60

  # Dotted keys need the map form: HCL2 block attributes are identifiers.
  meta = {
    "llm-scheduler.model"   = var.model
    "llm-scheduler.replica" = var.replica
  }

  group "shard-0" {
    count = 1

    constraint {
      attribute = "${node.unique.id}"
      value     = var.node_id
    }

    network {
      mode = "host"
      port "http" {
        to = 8000
      }
    }

    service {
      name = local.service
      port = "http"
      tags = ["llm", "model=${var.model}"]

      check {
        type     = "http"
        path     = "/health"
        interval = "10s"
        timeout  = "2s"
      }
    }

    restart {
      attempts = 3
      delay    = "15s"
      interval = "5m"
      mode     = "fail"
    }

    task "vllm" {
      driver = "docker"

      config {
        image = "vllm/vllm-openai:v0.6.3"
        ports = ["http"]
        args  = ["--model", var.model, "--tensor-parallel-size", var.gpus]
      }

      env {
        HF_HOME = "/models"
        REPLICA = "${var.replica}"
        ALLOC   = "${NOMAD_ALLOC_ID}"
      }

      resources {
        cpu    = 8000
        memory = 65536

        device "nvidia/gpu" {
          count = var.gpus

          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "40 GiB"
          }
        }
      }

      template {
        destination = "local/env.txt"
        data        = <<-EOT
          MODEL=${var.model}
          VISIBLE={{ env "NVIDIA_VISIBLE_DEVICES" }}
        EOT
      }
    }
  }
}
