"""Built-in example models, built from code with fixed-seed weights (no downloads)."""

from kiln.models.cnn import small_cnn  # noqa: F401
