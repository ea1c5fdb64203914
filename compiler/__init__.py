"""clawc: compiles pod files and service descriptors into sidecar builds (docs/compiler.md)."""
