"""The machine code is built for, as one immutable value.

`Target.host()` reads this machine once (the only place in Kiln that reads /proc/cpuinfo, sysfs, the CPU
count or what the compiler on PATH makes of -march=native; `host_available_memory` reads /proc/meminfo);
everything else gets a Target passed down: passes read `PassContext.target`, schedules get it from
lowering. `str(target)` is a canonical one-line text and `Target.parse` reads it back; options a
partial text leaves out come from the host:

    c -arch=x86_64 -features=avx,avx2,fma -vector-bits=256 -vector-registers=16 -l1d=32K -l2=1M -l3=32M -cores=2 -cc=gcc
      -threading=openmp

`-threading` says how kernels run their parallel loops: `openmp` (libgomp's process-wide team) or
`kiln` (launches into Kiln's own thread pool, kiln/codegen/pool). The host's comes from the
KILN_THREADING environment variable, else DEFAULT_THREADING.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import os
import platform
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kiln.errors import CompileError, CompilerNotFoundError, KilnError

KINDS = ("c", "npu-sim")  # npu-sim: the simulated accelerator (kiln.npu), its default configuration
# Instruction-set extensions (as /proc/cpuinfo names them) that generated code may use.
ISA_FEATURES = frozenset(
    "sse sse2 pni ssse3 sse4_1 sse4_2 popcnt abm movbe aes pclmulqdq avx avx2 fma f16c bmi1 bmi2 adx "
    "avx512f avx512cd avx512bw avx512dq avx512vl avx512ifma avx512vbmi avx512_vbmi2 avx512_vnni "
    "avx512_bitalg avx512_vpopcntdq avx512_bf16 avx512_fp16 avx_vnni amx_tile amx_bf16 amx_int8 "
    "asimd asimdhp sve sve2".split())
# gcc's -m option of each x86 feature (cpuinfo name -> option), for a target that is not this machine
GCC_FEATURE_FLAGS = {
    "sse": "-msse", "sse2": "-msse2", "pni": "-msse3", "ssse3": "-mssse3", "sse4_1": "-msse4.1",
    "sse4_2": "-msse4.2", "popcnt": "-mpopcnt", "abm": "-mabm", "movbe": "-mmovbe", "aes": "-maes",
    "pclmulqdq": "-mpclmul", "avx": "-mavx", "avx2": "-mavx2", "fma": "-mfma", "f16c": "-mf16c", "bmi1": "-mbmi",
    "bmi2": "-mbmi2", "adx": "-madx", "avx512f": "-mavx512f", "avx512cd": "-mavx512cd", "avx512bw": "-mavx512bw",
    "avx512dq": "-mavx512dq", "avx512vl": "-mavx512vl", "avx512ifma": "-mavx512ifma", "avx512vbmi": "-mavx512vbmi",
    "avx512_vbmi2": "-mavx512vbmi2", "avx512_vnni": "-mavx512vnni", "avx512_bitalg": "-mavx512bitalg",
    "avx512_vpopcntdq": "-mavx512vpopcntdq", "avx512_bf16": "-mavx512bf16", "avx512_fp16": "-mavx512fp16",
    "avx_vnni": "-mavxvnni", "amx_tile": "-mamx-tile", "amx_bf16": "-mamx-bf16", "amx_int8": "-mamx-int8",
}
OPTIONS = ("arch", "features", "vector-bits", "vector-registers", "l1d", "l2", "l3", "cores", "cc", "threading")
THREADING = ("openmp", "kiln")
DEFAULT_THREADING = "openmp"  # the threading of the host target when KILN_THREADING does not say
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
CACHE_DEFAULTS = {1: 32 << 10, 2: 1 << 20, 3: 8 << 20}  # where sysfs does not say (level -> bytes)
_CURRENT: contextvars.ContextVar[Target | None] = contextvars.ContextVar("kiln_target", default=None)


@dataclass(frozen=True)
class Target:
    """What schedules and the compiler may assume about the machine that runs the code."""

    kind: str = "c"
    arch: str = "x86_64"
    features: frozenset[str] = frozenset()
    vector_bits: int = 256
    vector_registers: int = 16
    l1d_bytes: int = CACHE_DEFAULTS[1]
    l2_bytes: int = CACHE_DEFAULTS[2]
    l3_bytes: int = CACHE_DEFAULTS[3]
    cores: int = 1
    cc: str = "gcc"
    threading: str = DEFAULT_THREADING

    @classmethod
    def host(cls) -> Target:
        """This machine, detected once per process."""
        return _detect_host()

    @classmethod
    def parse(cls, text: str | Target | None) -> Target:
        """The target a string names (see the module doc); None or "" is the host."""
        if isinstance(text, Target):
            return text
        return _parse(text or "")

    @staticmethod
    def current() -> Target:
        """The target of the lowering in progress (`building_for`), else the host. Only for code the
        target cannot reach as an argument: computes, whose registry signature has no target."""
        return _CURRENT.get() or Target.host()

    @property
    def vector_bytes(self) -> int:
        return self.vector_bits // 8

    @property
    def native(self) -> bool:
        """Whether the code runs on the machine that builds it (the compiler may then tune for it)."""
        host = Target.host()
        return (self.kind, self.arch, self.features) == (host.kind, host.arch, host.features)

    def compiler_flags(self, base: tuple[str, ...]) -> tuple[str, ...]:
        """`base` (the compiler's flags for this machine, with -march=native) for this target: unchanged when
        the target is this machine, else -march=native replaced by the target's ISA spelled out."""
        if self.threading == "kiln":  # `omp simd` stays; no OpenMP runtime is linked
            base = tuple("-fopenmp-simd" if f == "-fopenmp" else f for f in base)
        if self.native:
            return base
        march = [f"-march={self.arch.replace('_', '-')}", "-mtune=generic"] if self.arch == "x86_64" else []
        isa = [GCC_FEATURE_FLAGS[f] for f in sorted(self.features) if f in GCC_FEATURE_FLAGS]
        return tuple(x for f in base for x in ((*march, *isa) if f == "-march=native" else (f,)))

    @functools.cached_property
    def key(self) -> str:
        """A short stable name of this target and the compiler's identity, for cache keys and tuning records."""
        identity = compiler_identity(find_compiler(self.cc))
        digest = hashlib.sha256(f"{self}\0{identity}".encode()).hexdigest()
        return f"{self.kind}-{digest[:16]}"

    def missing_features(self, host: Target | None = None) -> list[str]:
        """The ISA features this target's code may use that `host` (default: this machine) lacks."""
        host = host or Target.host()
        return sorted(self.features - host.features)

    def cores_note(self, host: Target | None = None) -> str | None:
        """What differs when code built for this target runs on `host` (default: this machine) with another
        core count, and how a session handles it (kiln.session: threads default to min(cores, host's)); None
        when the counts agree."""
        host = host or Target.host()
        if self.cores == host.cores:
            return None
        how = (f"it runs {self.cores} threads by default" if self.cores < host.cores else
               f"it runs on all {host.cores}, some of them taking more of its parallel work")
        return (f"built for {self.cores} cores, this machine has {host.cores}: its parallel loops were split for "
                f"{self.cores}, so {how}")

    def __str__(self) -> str:
        return " ".join([self.kind, f"-arch={self.arch}", f"-features={','.join(sorted(self.features))}",
                         f"-vector-bits={self.vector_bits}", f"-vector-registers={self.vector_registers}",
                         f"-l1d={_size(self.l1d_bytes)}", f"-l2={_size(self.l2_bytes)}", f"-l3={_size(self.l3_bytes)}",
                         f"-cores={self.cores}", f"-cc={self.cc}", f"-threading={self.threading}"])


@contextlib.contextmanager
def building_for(target: Target) -> Iterator[Target]:
    """Within this block Target.current() is `target` (lowering enters it around computes)."""
    token = _CURRENT.set(target)
    try:
        yield target
    finally:
        _CURRENT.reset(token)


def host_cores() -> int:
    """The CPUs of the machine this process runs on (threads to start, compilers to run at once)."""
    return os.cpu_count() or 1


@functools.cache
def host_available_memory(meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes this machine can give a process without swapping (MemAvailable), read once; None where
    the kernel does not say. The default bound on one tensor Kiln allocates (kiln.ir.sizes)."""
    try:
        text = Path(meminfo).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key == "MemAvailable" and rest.split():
            return int(rest.split()[0]) * 1024
    return None


def default_vector_bits(arch: str, features: frozenset[str]) -> int:
    """The SIMD width gcc uses for these features: 512 with AVX-512, 128 on Arm's NEON, else 256."""
    if "avx512f" in features:
        return 512
    return 128 if arch in ("aarch64", "arm64") else 256


def default_vector_registers(vector_bits: int) -> int:
    """Vector registers gcc can allocate: 32 with AVX-512 (zmm0-31), else 16 (ymm0-15). A register tile's
    accumulators, weights and broadcasts must fit in them, or gcc spills to the stack."""
    return 32 if vector_bits >= 512 else 16


@functools.cache
def _detect_host() -> Target:
    arch = platform.machine() or "x86_64"
    features = frozenset(_cpu_flags() & ISA_FEATURES)
    bits = default_vector_bits(arch, features)
    caches = _cache_sizes()
    return Target("c", arch, features, bits, default_vector_registers(bits), caches[1], caches[2], caches[3],
                  host_cores(), threading=_threading(os.environ.get("KILN_THREADING") or DEFAULT_THREADING,
                                                     "the environment variable KILN_THREADING"))


def _cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def _cache_sizes(base: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[int, int]:
    """Data (or unified) cache size per level of one core, from sysfs; CACHE_DEFAULTS where it is silent."""
    sizes = dict(CACHE_DEFAULTS)
    try:
        for index in sorted(os.listdir(base)):
            d = Path(base, index)
            if not d.is_dir() or (d / "type").read_text().strip() == "Instruction":
                continue
            sizes[int((d / "level").read_text())] = _bytes((d / "size").read_text().strip(), "cache size")
    except (OSError, ValueError, KilnError):
        pass
    return sizes


def _size(n: int) -> str:
    for unit in ("G", "M", "K"):
        if n and n % UNITS[unit] == 0:
            return f"{n // UNITS[unit]}{unit}"
    return str(n)


def _bytes(text: str, option: str) -> int:
    scale = UNITS.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit():
        raise KilnError(f"target option -{option}={text}: expected a size such as 512K or 32M")
    return int(digits) * scale


def _int(text: str, option: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise KilnError(f"target option -{option}={text}: expected a positive integer")
    return int(text)


def _threading(text: str, where: str) -> str:
    if text not in THREADING:
        raise KilnError(f"{where}={text}: unknown threading mode; the modes are {', '.join(THREADING)}")
    return text


def _parse(text: str) -> Target:
    kind, *opts = text.split() or ["c"]
    if kind not in KINDS:
        raise KilnError(f"unknown target kind {kind!r} in {text!r}; the kinds are {', '.join(KINDS)}")
    given: dict[str, str] = {}
    for opt in opts:
        name, eq, value = opt.lstrip("-").partition("=")
        if not opt.startswith("-") or name not in OPTIONS or not eq:
            raise KilnError(f"unknown target option {opt!r} in {text!r}; the options are "
                            f"{', '.join(f'-{o}=...' for o in OPTIONS)}")
        given[name] = value
    return _with_options(dataclasses.replace(Target.host(), kind=kind), given)


def _with_options(base: Target, given: dict[str, str]) -> Target:
    """`base` with the parsed options; the vector width follows given features, the registers a given width."""
    arch = given.get("arch", base.arch)
    features = frozenset(f for f in given["features"].split(",") if f) if "features" in given else base.features
    unknown = sorted(features - ISA_FEATURES)
    if unknown:
        raise KilnError(f"unknown ISA feature(s) {', '.join(unknown)} in -features; known: "
                        f"{', '.join(sorted(ISA_FEATURES))}")
    bits = (_int(given["vector-bits"], "vector-bits") if "vector-bits" in given
            else default_vector_bits(arch, features) if "features" in given or "arch" in given else base.vector_bits)
    registers = (_int(given["vector-registers"], "vector-registers") if "vector-registers" in given
                 else default_vector_registers(bits) if bits != base.vector_bits else base.vector_registers)
    sizes = {level: _bytes(given[level], level) if level in given else getattr(base, f"{level}_bytes")
             for level in ("l1d", "l2", "l3")}
    cores = _int(given["cores"], "cores") if "cores" in given else base.cores
    threading = _threading(given["threading"], "target option -threading") if "threading" in given \
        else base.threading
    return Target(base.kind, arch, features, bits, registers, sizes["l1d"], sizes["l2"], sizes["l3"], cores,
                  given.get("cc", base.cc), threading)


# The compiler on this machine is part of the machine: what it is and what -march=native means here.


def find_compiler(cc: str = "gcc") -> str:
    """The absolute path of `cc` (a name looked up on PATH, or a path)."""
    found = shutil.which(cc)
    if found is None:
        raise CompilerNotFoundError(
            f"C compiler {cc!r} not found (looked on PATH={os.environ.get('PATH', '')!r}). Kiln's CPU backend "
            "compiles kernels with gcc: install it (Debian/Ubuntu: `apt-get install gcc`; Fedora: "
            "`dnf install gcc`; macOS: `brew install gcc`) or pass the compiler's path as `cc=`.")
    return found


def compiler_identity(cc_path: str) -> str:
    """What the compiler is (version, and what -march=native means on this machine): part of the
    cache key, so an upgraded gcc or another CPU never reuses a stale library."""
    st = os.stat(cc_path)
    return _identity(cc_path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _identity(cc_path: str, mtime_ns: int, size: int) -> str:
    version = _run_tool([cc_path, "--version"]).stdout
    target = _run_tool([cc_path, "-march=native", "-Q", "--help=target"]).stdout
    return f"{version}\n{hashlib.sha256(target.encode()).hexdigest()}"


def _run_tool(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run a tool of the toolchain; a failure is a CompileError quoting its complaint."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompileError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {proc.stderr.strip()[:500]}")
    return proc
