"""Serving: `kiln serve REPO` answers KServe v2 inference requests for the models of a repository,
real-time requests ahead of best-effort ones (kiln.serve.dispatch is the seam between the HTTP
front end and the schedulers that run requests)."""
