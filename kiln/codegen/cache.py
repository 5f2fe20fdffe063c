"""A content-addressed on-disk cache of compiled modules.

Key: sha256 of the source, the flags and the compiler's identity. Every file appears atomically
(written under a unique temporary name, then os.replace), so processes building the same module
at once all end up loading one complete library; a hit runs no compiler at all.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from kiln.codegen.compiler import FLAGS, compile_shared, compiler_identity, find_compiler


def default_cache_dir() -> Path:
    return Path(os.environ.get("KILN_CACHE_DIR") or Path.home() / ".cache" / "kiln")


def cache_key(source: str, flags: tuple[str, ...], identity: str) -> str:
    h = hashlib.sha256()
    for part in (source, "\0".join(flags), identity):
        data = part.encode()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


class CompileCache:
    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()

    def paths(self, key: str) -> tuple[Path, Path]:
        """(source, library) paths of a key."""
        d = self.root / key[:2]
        return d / f"{key}.c", d / f"{key}.so"

    def build(self, source: str, cc: str = "gcc", flags: tuple[str, ...] = FLAGS) -> Path:
        """The library compiled from `source`, from the cache or freshly built into it."""
        cc_path = find_compiler(cc)
        src, lib = self.paths(cache_key(source, flags, compiler_identity(cc_path)))
        if lib.exists():
            return lib
        lib.parent.mkdir(parents=True, exist_ok=True)
        if not src.exists():
            _atomic_write(src, source.encode())
        fd, tmp = tempfile.mkstemp(prefix=f".{lib.stem[:16]}.", suffix=".so.tmp", dir=lib.parent)
        os.close(fd)
        try:
            compile_shared(src, Path(tmp), cc_path, flags)
            os.replace(tmp, lib)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return lib


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:16]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
