"""Identity (SPEC §21): the tokens the sidecar sends to services for the pod and for the end
user (``oauth_client.py``), and where they are discovered (``resource_metadata.py``)."""
