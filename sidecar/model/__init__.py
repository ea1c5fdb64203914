"""The provider-neutral model at the bottom of the sidecar: conversation, calls, usage, outcomes."""
