"""Helpers shared by the tests (imported as `support.<module>`; pyproject.toml puts tests/ on pytest's path)."""
