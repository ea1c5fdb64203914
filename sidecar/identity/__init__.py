"""Who a request is from and for, by the tokens of the pod's identity providers (SPEC §21)."""
