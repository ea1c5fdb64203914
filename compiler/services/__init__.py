"""Tool services: their descriptors, where those come from, schemas made provider-safe, and the
names the model sees."""
