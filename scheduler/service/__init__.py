"""The long-running scheduler service: watch, snapshot, decide, act, record."""
