# Nomad client agent for a GPU node, for llm-scheduler.
#
#   nomad agent -config=/etc/nomad.d/client-gpu.hcl
#
# Install the NVIDIA device plugin (hashicorp/nomad-device-nvidia, 1.1.0 or later for MIG)
# as <plugin_dir>/nomad-device-nvidia; the `plugin` label below must match that file name.
# The node also needs the NVIDIA driver (libnvidia-ml.so.1) and, for the docker driver,
# the NVIDIA container toolkit (docker runtime "nvidia").

datacenter = "dc1"
data_dir   = "/opt/nomad/data"
plugin_dir = "/opt/nomad/plugins"

client {
  enabled = true
  # The GPU reporter job (jobspecs/gpu-reporter.nomad.hcl) selects GPU nodes by class.
  node_class = "gpu"
  # Node pools are OSS since Nomad 1.6; the scheduler reports it in the snapshot.
  node_pool = "default"

  # What the scheduler may hand to models: keep some CPU and memory for the host.
  reserved {
    cpu    = 2000 # MHz
    memory = 8192 # MiB
  }

  meta {
    # Free-form, shown by `llm-scheduler snapshot`; NVLink topology comes from the reporter.
    gpu = "true"
  }

  # The model cache (a static host volume): replicas on this node mount it as their
  # Hugging Face cache (HF_HOME), so weights downloaded once are loaded from local disk the
  # next time. The name is the scheduler's `model_cache_volume` setting. The path must exist
  # before the client starts; put it on local NVMe with room for the models this node may
  # serve (docs/operating.md, "Model cache"). nomad/model-cache.volume.hcl is the dynamic
  # alternative (Nomad 1.10 and later): use one or the other on a node, not both.
  host_volume "llm-model-cache" {
    path      = "/opt/llm-model-cache"
    read_only = false
  }
}

consul {
  address = "127.0.0.1:8500"
  # token = "<a token with the Nomad client's Consul policy>"
}

plugin "nomad-device-nvidia" {
  config {
    enabled = true
    # How often the plugin looks again: new MIG layouts and lost GPUs show up after this.
    fingerprint_period = "1m"
    # GPUs Nomad must never hand out (e.g. the one driving a display):
    # ignored_gpu_ids = ["GPU-fef8089b-..."]
  }
}

# MIG notes
# - With MIG enabled on a GPU, the plugin (1.1.0+) fingerprints each MIG instance as a GPU of
#   its own, in a device group named like "NVIDIA A100-SXM4-80GB MIG 3g.40gb", with ids
#   "MIG-<uuid>". The parent GPU is then not offered whole. llm-scheduler reads these groups
#   and places `mig_profile` profiles on them.
# - Partition a GPU before Nomad fingerprints it, while no allocation uses it:
#     nvidia-smi -i 0 -mig 1                  # enable MIG mode (may need a GPU reset)
#     nvidia-smi mig -i 0 -cgi 9,9 -C         # e.g. two 3g.40gb instances on an A100 80GB
#   or NVIDIA's mig-parted with a config file. `llm-scheduler mig plan` proposes layouts.
# - After re-partitioning, restart the Nomad client (or wait fingerprint_period) so the
#   new instances are fingerprinted.
# - ignored_gpu_ids takes MIG ids ("MIG-...") as well as GPU ids.

# raw_exec runs the GPU reporter on the host, where NVML lives.
plugin "raw_exec" {
  config {
    enabled = true
  }
}

plugin "docker" {
  config {
    allow_runtimes = ["runc", "nvidia"]
  }
}

acl {
  enabled = true
}
