"""Thin OpenAI and Anthropic codecs between provider wire formats and the neutral conversation."""
