"""Identity (SPEC §21): who a request is from and for, by the tokens of the pod's identity
providers (``jwt``-verifying modules), and the tokens the sidecar sends to services for the pod
and for the end user (``oauth_client.py``), where they are discovered (``resource_metadata.py``)."""
