"""`python -m scheduler` runs the same command line as `llm-scheduler`."""

from scheduler.cli import main

main()
