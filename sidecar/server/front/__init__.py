"""The HTTP front: the listener's edge (heads, bodies, keep-alive, protocol errors), serving
it on sockets, and the aiohttp version it needs. Knows nothing of models or tools."""
