"""The sidecar's aiohttp server, in rooms bottom to top: ``front`` and ``providers``;
``request``; ``accounting``, ``failover`` and ``operator``; ``translated``; ``mediated``;
``llm``; and the apps here (``app.py``, ``admin.py``, ``routes.py``). A room imports only
rooms below it (``tests/test_layers.py``)."""
