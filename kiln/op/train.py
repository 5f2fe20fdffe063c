"""train operators."""
