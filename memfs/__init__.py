"""memfs: Memory Stores mounted as ordinary directories through FUSE."""

__version__ = "0.1.0"
