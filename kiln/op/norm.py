"""norm operators."""
