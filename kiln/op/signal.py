"""signal operators."""
