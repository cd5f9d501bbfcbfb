# The model cache as a dynamic host volume (Nomad 1.10 and later), created per node:
#
#   nomad volume create nomad/model-cache.volume.hcl   # after setting node_id below
#
# `nomad volume create` waits until the volume is ready; the node then advertises it in its
# HostVolumes and llm-scheduler mounts it into the replicas it places there (HF_HOME).
# The built-in `mkdir` plugin makes <host_volumes_dir>/<volume id> and ignores capacity:
# size the disk under host_volumes_dir yourself (docs/operating.md, "Model cache").
# Delete with `nomad volume delete -type host <volume id>` (the weights go with it).

type      = "host"
name      = "llm-model-cache" # the scheduler's model_cache_volume setting
plugin_id = "mkdir"           # without it the server stores "default", which no node has
node_id   = "<nomad node id>"

capacity_min = "500GiB"
capacity_max = "2TiB"

# What the replicas ask for when they do not say (Nomad's default for a dynamic volume).
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

parameters {
  mode = "0755"
}
