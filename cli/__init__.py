"""``clawc``: the command line over both programs (compile a pod, inspect a build, operate running
sidecars)."""
