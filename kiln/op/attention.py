"""attention operators."""
