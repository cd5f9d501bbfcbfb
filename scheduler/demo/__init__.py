"""`llm-scheduler demo`: the real service against the embedded stand-ins, with a demand trace."""
