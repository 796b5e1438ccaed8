"""Sessions, messages, runs, steps and run events (DESIGN.md sections 2-4)."""
