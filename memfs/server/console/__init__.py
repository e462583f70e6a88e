"""The web console of `memfs serve`: server-rendered pages at /console (docs/console.md)."""
