# vLLM replica template. llm-scheduler renders it through /v1/jobs/parse with these
# variables, then adds the placement (one group per shard, node pin, device block, Meta).
variable "model" { type = string }
variable "service_name" { type = string }
variable "image" {
  type    = string
  default = "vllm/vllm-openai:latest"
}
variable "extra_args" {
  type    = string
  default = ""
}

job "llm" {
  type = "service"

  group "shard" {
    network {
      port "http" { to = 8000 }
    }

    task "server" {
      driver = "docker"

      config {
        image   = var.image
        ports   = ["http"]
        command = "/bin/sh"
        args    = ["-c", "exec vllm serve ${var.model} --served-model-name ${var.model} --port 8000 ${var.extra_args}"]
      }

      service {
        name     = var.service_name
        port     = "http"
        provider = "consul"
        check {
          type     = "http"
          path     = "/health"
          interval = "10s"
          timeout  = "2s"
        }
      }

      resources {
        cpu    = 1000
        memory = 1024
      }
    }
  }
}
