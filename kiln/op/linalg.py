"""linalg operators."""
