"""The LLM routes: the model endpoints of each protocol, and pass-through to the provider."""
