"""Hash-chained JSONL audit log of every client request and tool call."""
