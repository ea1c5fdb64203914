"""A request's state: the sidecar's shared state, the request's context and exchange with
the client, its translation plan, and the error answer in the caller's protocol."""
