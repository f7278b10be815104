"""Daemon configuration: JSON schema, loading and validation."""
