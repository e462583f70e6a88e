"""Helpers shared by the test suites: a real `memfs serve` process and an API client."""
