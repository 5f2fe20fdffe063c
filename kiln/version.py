"""Kiln's version: artifacts record it, and a library built by another version is not loaded (its ABI may differ).
A module of its own at the bottom of the layers, so the runtime can read it without importing the compiler."""

__version__ = "0.1.0"
