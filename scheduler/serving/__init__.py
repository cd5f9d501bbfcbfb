"""What a replica's container runs: runtime flag lists, argv rendering, the catalog's model."""
