"""Shared test scaffolding: one fixture per concept, defined once."""
