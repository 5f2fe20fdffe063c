"""sequence operators."""
