"""vision operators."""
