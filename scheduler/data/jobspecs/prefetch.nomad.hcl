# Prefetch template (shipped in the package; an operator may override it with
# LLM_SCHEDULER_JOBSPEC_DIR/prefetch.nomad.hcl). A prefetch job downloads one model's weights
# into one node's model cache ahead of demand (serve.prefetch), with the runtime image's own
# downloader (`hf download`, huggingface_hub) and no GPU. llm-scheduler renders it through
# Nomad's /v1/jobs/parse with the variables below, then pins it to its node, names the cache
# volume's source, and sets the task's entrypoint and args (argv items, never a shell), the
# model's environment (serve.env, as its replicas get it: a gated repository's HF_TOKEN
# included) and Meta.
variable "service_name" { type = string }
variable "image" {
  type    = string
  default = "vllm/vllm-openai:latest"
}

job "llm-prefetch" {
  type = "batch"
  # Below the replicas' 50 (Nomad's default): a prefetch never comes first.
  priority = 20

  group "fetch" {
    # The scheduler retries on another node itself, and reports a failure per model.
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }

    volume "model-cache" {
      type   = "host"
      source = "llm-model-cache"
    }

    task "download" {
      driver = "docker"

      config {
        image = var.image
      }

      volume_mount {
        volume      = "model-cache"
        destination = "/root/.cache/huggingface"
      }

      env {
        HF_HOME = "/root/.cache/huggingface"
      }

      resources {
        cpu    = 500
        memory = 1024
      }
    }
  }
}
