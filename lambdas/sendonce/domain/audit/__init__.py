"""Auditing a campaign against the provider's own records of what it sent (docs/operations.md)."""
