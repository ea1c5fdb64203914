"""What a compile writes: the build (manifests, context, env files), the compose file and its
Kubernetes and Swarm translations."""
