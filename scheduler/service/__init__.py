"""The long-running scheduler service: watch, snapshot, decide, act, record (issue 4)."""
