"""tensor operators."""
