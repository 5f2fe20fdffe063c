"""Frontends: model formats -> kiln.ir.IRModule."""
