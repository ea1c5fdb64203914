"""The operator plane: the operator API, the console and their sign-in. It reads the
sidecar's state and imports nothing of the LLM path."""
