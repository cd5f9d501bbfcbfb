"""The operator experience: metrics, tracing, the dashboard, and the helpers the CLI shares."""
