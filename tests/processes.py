"""Fixtures that start real processes for the tests that prove execution."""
