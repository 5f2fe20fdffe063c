"""C identifiers for names that come from models, schedules and users.

Every identifier in generated C goes through a NameScope: the name is reduced to [A-Za-z0-9_],
kept away from C keywords, object-like macros, the functions generated code calls and Kiln's
own `kiln_`/`KILN_` prefix, and made unique within its scope. A name like `x"); system("id"); //`
becomes the harmless `x_system_id`.
"""

from __future__ import annotations

import re

C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
asm typeof _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert
_Thread_local bool true false NULL main
""".split())

# NOTE: gcc in gnu11 mode predefines these lowercase object-like macros.
GNU_MACROS = frozenset({"linux", "unix", "i386", "errno", "stdin", "stdout", "stderr"})

# Functions generated code may call: a local of the same name would shadow them.
CALLED_FUNCTIONS = frozenset("""
memcpy memset malloc free aligned_alloc abort
exp expf log logf sqrt sqrtf tanh tanhf erf erff pow powf fabs fabsf floor floorf ceil ceilf round roundf
nearbyint nearbyintf rint rintf sin sinf cos cosf tan tanf asin asinf acos acosf atan atanf atan2 atan2f
sinh sinhf cosh coshf asinh asinhf acosh acoshf atanh atanhf log1p log1pf expm1 expm1f trunc truncf
log2 log2f log10 log10f exp2 exp2f fmod fmodf copysign copysignf fma fmaf
isnan isinf isfinite signbit
""".split())

MAX_LEN = 48
_RESERVED_PREFIX = re.compile(r"^(kiln|KILN|_)")
_MACRO_LIKE = re.compile(r"^[A-Z][A-Z0-9_]+$")  # INFINITY, NAN, INT64_MAX, M_PI, EOF...


def clean(name: str) -> str:
    """A valid C identifier that keeps as much of `name` as is safe (not yet unique)."""
    s = re.sub(r"[^A-Za-z0-9_]+", "_", name)
    s = re.sub(r"_+", "_", s).strip("_")[:MAX_LEN].rstrip("_")
    if (not s or s[0].isdigit() or s in C_KEYWORDS or s in GNU_MACROS or s in CALLED_FUNCTIONS
            or _RESERVED_PREFIX.match(s) or _MACRO_LIKE.match(s) or s.endswith("_t")):
        s = f"v_{s}" if s else "v"
    return s


class NameScope:
    """Assigns each object (by identity) one unique C identifier; nested scopes see their parent's
    names so a local never shadows a global."""

    def __init__(self, parent: NameScope | None = None):
        self.parent = parent
        self._by_obj: dict[int, str] = {}
        self._keep: list[object] = []  # keep objects alive so id() stays unique
        self._used: set[str] = set()

    def _taken(self, ident: str) -> bool:
        return ident in self._used or (self.parent is not None and self.parent._taken(ident))

    def fresh(self, hint: str) -> str:
        """A new identifier not tied to any object (temporaries)."""
        base = clean(hint)
        ident, n = base, 0
        while self._taken(ident):
            n += 1
            ident = f"{base}_{n}"
        self._used.add(ident)
        return ident

    def get(self, obj: object, hint: str) -> str:
        """The identifier of `obj`, created from `hint` on first use."""
        key = id(obj)
        if key not in self._by_obj:
            self._by_obj[key] = self.fresh(hint)
            self._keep.append(obj)
        return self._by_obj[key]

    def owns(self, obj: object) -> bool:
        """Whether `obj` got its identifier in this scope (not in a parent)."""
        return id(obj) in self._by_obj

    def lookup(self, obj: object) -> str | None:
        found = self._by_obj.get(id(obj))
        if found is None and self.parent is not None:
            return self.parent.lookup(obj)
        return found
