"""Backends: turn generated source into loadable native modules (compiler driver, build cache)."""
