# SGLang replica template (shipped in the package; an operator may override it with
# LLM_SCHEDULER_JOBSPEC_DIR/sglang.nomad.hcl). llm-scheduler renders it through Nomad's
# /v1/jobs/parse with the variables below, then gives it its placement: one group per shard
# pinned to its node, the device block, NodePool, Meta. The scheduler also sets the task's
# command and args (`python3 -m sglang.launch_server --model-path ... --host 0.0.0.0`: the
# image has no ENTRYPOINT), its check_restart grace and, for a multi-node replica, host
# networking, the rendezvous port and the head-only service.
variable "service_name" { type = string }
variable "image" {
  type    = string
  default = "lmsysorg/sglang:latest"
}

job "llm" {
  type = "service"

  group "shard" {
    # No deployments: max_parallel = 0 makes the update strategy empty (Nomad
    # UpdateStrategy.IsEmpty), so no deployment watcher fails or replaces a replica that is
    # still loading its weights. The scheduler judges readiness itself (Consul check).
    update {
      max_parallel = 0
    }

    # The node's model cache, a Nomad host volume (docs/operating.md, "Model cache"). The
    # scheduler names its source (setting model_cache_volume) where the node advertises the
    # volume, and drops it and its mount elsewhere: asking there would leave the replica
    # unplaceable, so such a node is simply cold.
    volume "model-cache" {
      type   = "host"
      source = "llm-model-cache"
    }

    network {
      port "http" { to = 30000 }
    }

    task "server" {
      driver = "docker"

      config {
        image   = var.image
        command = "python3"
        ports   = ["http"]
        # SGLang docs: --shm-size 32g --ipc=host; its compose file adds these ulimits.
        ipc_mode = "host"
        ulimit {
          memlock = "-1"
          stack   = "67108864"
        }
      }

      service {
        name     = var.service_name
        port     = "http"
        provider = "consul"
        check {
          type     = "http"
          path     = "/health"
          interval = "30s"
          # SGLang's /health runs a 1-token generation with a 20 s internal time-out.
          timeout  = "25s"
        }
        # grace is set to the model's load_grace_s by the scheduler.
        check_restart {
          limit = 3
          grace = "30m"
        }
      }

      # The runtime's Hugging Face cache (the image runs as root): weights land on the volume.
      volume_mount {
        volume      = "model-cache"
        destination = "/root/.cache/huggingface"
      }

      env {
        HF_HOME = "/root/.cache/huggingface"
      }

      kill_timeout = "30s"

      resources {
        cpu    = 1000
        memory = 1024
      }
    }
  }
}
