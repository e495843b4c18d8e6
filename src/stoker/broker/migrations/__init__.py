"""Alembic migrations of the broker's store, run programmatically at start."""
