"""A compiled model on disk: the library, the fused graph as JSON, the weights as one raw file.

DIR/model.so is the kernels' library and DIR/kiln_pool.so Kiln's thread pool they launch into (loaded
first, so a deployed directory runs without gcc); DIR/model.json holds the fused IR (Kiln's text form, weights
by reference), each kernel's calling convention, the model's inputs/outputs, the Kiln version, the
compiler flags, the target it was built for (kiln.Target's string), the library's sha256 and the
weights' index; DIR/weights.bin holds the weights as aligned raw tensors (kiln.runtime.weights_file: no
pickle, a crc32 per tensor), memory-mapped read-only on load so processes loading one model share them.
Loading checks all of that before it trusts the library (a target with an ISA feature this CPU lacks is
refused; a different core count is warned about), then rebuilds the executor state: no compiler runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln.codegen import loader, pool_library
from kiln.codegen.compiler import FLAGS
from kiln.errors import ArtifactError, KilnError
from kiln.ir.expr import Function, Tuple
from kiln.ir.module import IRModule
from kiln.runtime.aot_executor import AotExecutor, MemoryReport
from kiln.runtime.counted_executor import CountedExecutor, CountedProgram
from kiln.runtime.dataflow_executor import DataflowExecutor, DataflowSchedule
from kiln.runtime.saved_graph import SavedGraph, saved_interface
from kiln.runtime.specialize import CompileSpecialized
from kiln.runtime.weights_file import read_weights, write_weights
from kiln.target import Target
from kiln.version import __version__

if TYPE_CHECKING:
    from kiln.codegen.kernel import Kernel
    from kiln.codegen.module import CFunction
    from kiln.runtime.executor import BoundKernel, GraphExecutor

FORMAT = "kiln-compiled-model"
# 2: the target string replaces the list of CPU features; 3: weights.bin replaces weights.npz; 4: the graph text's
# sha256 (an AOT model is loaded without parsing its graph, so a damaged graph is caught by the digest)
FORMAT_VERSION = 4
LIBRARY, GRAPH, WEIGHTS, POOL_LIBRARY = "model.so", "model.json", "weights.bin", "kiln_pool.so"
def assemble(fused: IRModule, kernel_of: dict[int, Kernel], host: list[str],
             function: Callable[[Kernel], CFunction], library: Any,
             compile_specialized: CompileSpecialized | None = None) -> GraphExecutor:
    """The executor state: each Primitive function that has a kernel gets its callable.
    `compile_specialized`: the compiler's, for groups that get a kernel at run time (else they run on the host)."""
    from kiln.codegen.kernel_binding import size_bindings
    from kiln.runtime.executor import BoundKernel, GraphExecutor, primitive_functions  # imports every operator

    compiled: dict[int, BoundKernel] = {}
    by_kernel: dict[int, BoundKernel] = {}
    for fn in primitive_functions(fused):
        k = kernel_of.get(id(fn))
        if k is None:
            continue
        if id(k) not in by_kernel:
            by_kernel[id(k)] = BoundKernel(k, function(k), size_bindings(k), fn)
        compiled[id(fn)] = by_kernel[id(k)]
    return GraphExecutor(fused, compiled, host, library, compile_specialized)


def export(directory: str | os.PathLike, cm: GraphExecutor, info: dict[str, Any],
           aot: AotExecutor | None = None) -> Path:
    """Write `cm` to `directory`: everything goes into a sibling temporary directory first, which is
    renamed into place only when complete, so no failure leaves a partial model behind. With `aot`
    (the library then holds its entry function), the AOT executor's weights, outputs and arena size
    are saved too, so the loaded model runs through `kiln_model_run` again."""
    from kiln.ir.printer import text_with_params
    from kiln.runtime.executor import primitive_functions

    dest = Path(directory).resolve()
    if dest.exists() and not (dest / GRAPH).is_file() and (not dest.is_dir() or any(dest.iterdir())):
        raise ArtifactError(f"{dest} exists and is not a compiled Kiln model; refusing to overwrite it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{dest.name}.tmp-", dir=dest.parent))
    try:
        text, params = text_with_params(cm.mod)
        weights = {f"param{i}": a for i, a in enumerate(params)}
        by_id = {id(a): key for key, a in weights.items()}
        kernels = _kernel_records(cm, by_id, weights)
        aot_meta = _aot_record(aot, by_id, weights) if aot is not None else None
        index = write_weights(tmp / WEIGHTS, weights)
        if cm.library is not None:
            shutil.copyfile(cm.library.path, tmp / LIBRARY)
            shutil.copyfile(pool_library.library_path(), tmp / POOL_LIBRARY)
        meta = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "kiln_version": __version__,
            **info, "compiler_flags": list(Target.parse(info.get("target")).compiler_flags(FLAGS)),
            "files": {n: _sha256(tmp / n) for n in (LIBRARY, POOL_LIBRARY) if (tmp / n).exists()},
            "weights": index, "num_params": len(params), "graph": text, "graph_sha256": _text_sha256(text),
            "kernels": kernels,
            "groups": [_kernel_name(cm, fn) for fn in primitive_functions(cm.mod)],
            "host_groups": list(cm.host_groups),
            **({"aot": aot_meta} if aot_meta is not None else {}),
        }
        (tmp / GRAPH).write_text(json.dumps(meta, indent=1))
        _replace_dir(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _weight_key(a: np.ndarray, name: str, by_id: dict[int, str], weights: dict[str, np.ndarray]) -> str:
    """The weights-file name of `a`: a graph parameter's key when it is one, else `name` (saved under it)."""
    key = by_id.get(id(a))
    if key is None:
        key = name
        weights[key] = a
    return key


def _kernel_records(cm: GraphExecutor, by_id: dict[int, str], weights: dict[str, np.ndarray]) -> list:
    from kiln.codegen.kernel_signature import encode_params

    seen: dict[int, dict] = {}
    for ck in cm.kernels.values():
        k = ck.kernel
        if id(k) in seen:
            continue
        consts = [_weight_key(a, f"{k.func.name}.const{j}", by_id, weights) for j, a in enumerate(k.constants)]
        seen[id(k)] = {"name": k.func.name, "symbol": ck.fn.info.symbol, "num_params": k.num_params,
                       "constants": consts,
                       "params": encode_params(dataclasses.replace(k.func, params=k.signature))}
    return list(seen.values())


def _aot_record(aot: AotExecutor, by_id: dict[int, str], weights: dict[str, np.ndarray]) -> dict[str, Any]:
    keys = [_weight_key(a, f"aot.weight{j}", by_id, weights) for j, a in enumerate(aot.weights)]
    rec = {"weights": keys, "outputs": [[list(shape), np.dtype(dt).str] for shape, dt in aot.output_layout],
           "arena_bytes": aot.arena_bytes, "memory": dataclasses.asdict(aot.memory_report()),
           "calls": list(aot.calls)}
    if isinstance(aot, DataflowExecutor):
        rec["dataflow"] = dataclasses.asdict(aot.schedule)
    if isinstance(aot, CountedExecutor):
        rec["counted"] = aot.program.to_json()
    return rec


def memory_report(meta: dict[str, Any]) -> MemoryReport | None:
    """The memory report saved with an AOT model (None for a graph-executor model or a malformed record)."""
    mem = meta.get("aot", {}).get("memory") if isinstance(meta.get("aot"), dict) else None
    try:
        return MemoryReport(**{**mem, "order": tuple(mem["order"])})
    except (TypeError, KeyError):
        return None


def _load_aot(mod: IRModule, rec: dict[str, Any], weights: dict[str, np.ndarray], directory: Path,
              library: Any, function: Any) -> AotExecutor:
    """The AOT executor of a saved model whose metadata has an "aot" record (see `export`)."""
    try:
        outputs = [(tuple(shape), np.dtype(dt)) for shape, dt in rec["outputs"]]
        mem = rec["memory"]
        report = MemoryReport(**{**mem, "order": tuple(mem["order"])})  # a malformed record is an ArtifactError
        calls = tuple(str(c) for c in rec.get("calls", ()))
        if "dataflow" in rec:
            return DataflowExecutor(mod, [weights[k] for k in rec["weights"]], outputs, int(rec["arena_bytes"]),
                                    library, report, calls, _schedule(rec["dataflow"]))
        if "counted" in rec:
            return CountedExecutor(mod, [weights[k] for k in rec["weights"]], outputs, library, report, calls,
                                   CountedProgram.from_json(rec["counted"]), function)
        return AotExecutor(mod, [weights[k] for k in rec["weights"]], outputs, int(rec["arena_bytes"]), library,
                           report, calls)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ArtifactError(f"{directory / GRAPH}: the AOT record is inconsistent ({type(e).__name__}: {e})"
                            ) from None


def _schedule(rec: dict[str, Any]) -> DataflowSchedule:
    return DataflowSchedule(tuple(tuple(int(s) for s in t) for t in rec["tasks"]),
                            tuple(tuple(int(d) for d in ds) for ds in rec["deps"]),
                            tuple(float(p) for p in rec["priority"]), int(rec["workers"]),
                            int(rec["cores_per_worker"]), str(rec.get("note", "")),
                            str(rec.get("threading", "openmp")))


def _kernel_name(cm: GraphExecutor, fn: Function) -> str | None:
    ck = cm.kernels.get(id(fn))
    return None if ck is None else ck.kernel.func.name


def _replace_dir(tmp: Path, dest: Path) -> None:
    if not dest.exists() or (dest.is_dir() and not any(dest.iterdir())):
        os.replace(tmp, dest)
        return
    old = Path(tempfile.mkdtemp(prefix=f"{dest.name}.old-", dir=dest.parent))
    os.replace(dest, old / "x")
    os.replace(tmp, dest)
    shutil.rmtree(old, ignore_errors=True)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def read_metadata(directory: str | os.PathLike) -> dict[str, Any]:
    """model.json, after checking it is a compiled Kiln model of this version for this CPU."""
    d = Path(directory)
    if not d.is_dir():
        raise ArtifactError(f"{d} is not a directory (a compiled model is a directory made by `kiln compile` "
                            "or model.export)")
    try:
        meta = json.loads((d / GRAPH).read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{d} has no {GRAPH}: not a compiled Kiln model, or an incomplete copy") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{d / GRAPH} is corrupt ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ArtifactError(f"{d / GRAPH} is not a compiled Kiln model description")
    if meta.get("format_version") != FORMAT_VERSION or meta.get("kiln_version") != __version__:
        raise ArtifactError(f"{d} was compiled by Kiln {meta.get('kiln_version')} (format "
                            f"{meta.get('format_version')}); this is Kiln {__version__} (format {FORMAT_VERSION}): "
                            "compile the model again")
    for name, digest in meta["files"].items():
        if not (d / name).is_file():
            raise ArtifactError(f"{d} is missing {name}")
        if _sha256(d / name) != digest:
            raise ArtifactError(f"{d / name} is corrupt (its sha256 does not match {GRAPH})")
    if not isinstance(meta.get("graph"), str) or _text_sha256(meta["graph"]) != meta.get("graph_sha256"):
        raise ArtifactError(f"{d / GRAPH}: the graph text is corrupt (its sha256 does not match graph_sha256)")
    lacking = artifact_target(meta, d).missing_features()
    if lacking:
        raise ArtifactError(f"{d} was compiled for a CPU with {', '.join(lacking)}, which this CPU lacks: "
                            "compile the model again on this machine, or for a target without them (--target)")
    return meta


def artifact_target(meta: dict[str, Any], where: str | os.PathLike = "the model") -> Target:
    """The target a saved model was built for."""
    try:
        return Target.parse(meta["target"])
    except (KeyError, TypeError, KilnError) as e:
        raise ArtifactError(f"{where}: no readable target in {GRAPH} ({e})") from None


def load(directory: str | os.PathLike, compile_specialized: CompileSpecialized | None = None,
         verify_weights: bool = True) -> tuple[SavedGraph, AotExecutor | None, dict[str, Any]]:
    """The graph saved in `directory` (see read_metadata for what is checked), and the AOT executor when the
    model was saved from one (its library holds the entry function). An AOT model's graph is parsed when first
    read (kiln.runtime.saved_graph); a graph-executor model's, which it runs, now. `compile_specialized`: see
    `assemble`. `verify_weights`: check each weight's crc32 (reads the whole weights file once; off, a
    damaged weight goes unnoticed until its results are wrong)."""
    d = Path(directory)
    meta = read_metadata(d)
    note = artifact_target(meta, d).cores_note()
    if note is not None:
        warnings.warn(f"{d}: {note}", stacklevel=2)
    if not isinstance(meta.get("weights"), list):
        raise ArtifactError(f"{d / GRAPH} has no index of {WEIGHTS}")
    weights = read_weights(d / WEIGHTS, meta["weights"], verify_weights)
    lib = LoadedLibrary(d / LIBRARY) if (d / LIBRARY).exists() else None
    saved = _saved_graph(meta, lambda: _graph_executor(meta, weights, d, lib, compile_specialized))
    if "aot" not in meta or lib is None:
        saved.executor()
        return saved, None, meta
    records = meta.get("kernels") if isinstance(meta.get("kernels"), list) else []
    symbols = {r.get("name"): r for r in records if isinstance(r, dict)}
    aot = _load_aot(saved, meta["aot"], weights, d, lib, lambda name: _function(lib, symbols[name]))
    return saved, aot, meta


def _function(lib: LoadedLibrary, record: dict[str, Any]) -> CFunction:
    """One kernel of the library, called on its own (a counted model's runs). Its calling convention is a tir
    signature: tir is imported here, not for an AOT model's one entry."""
    from kiln.codegen.func_info import FuncInfo
    from kiln.codegen.kernel_signature import decode_signature
    from kiln.codegen.module import CFunction

    return CFunction(FuncInfo(decode_signature(record["name"], record["params"]), record["symbol"], ""), lib.lib)


def _saved_graph(meta: dict[str, Any], parse: Callable[[], GraphExecutor]) -> SavedGraph:
    """The model's graph, with its inputs and outputs from model.json where it records them all (every AOT
    model: static shapes), else from the parsed graph."""
    interface = saved_interface(meta)
    if interface is None:
        executor = parse()
        return SavedGraph(executor.mod.input_vars, executor.mod.output_types, executor.mod.output_names,
                          lambda: executor)
    names = tuple(str(o["name"]) for o in meta["outputs"])
    return SavedGraph(*interface, names, parse)


def _graph_executor(meta: dict[str, Any], weights: dict[str, np.ndarray], d: Path, library: LoadedLibrary | None,
                    compile_specialized: CompileSpecialized | None) -> GraphExecutor:
    """The executor state of the saved graph: parsed (the operator records imported first) and each fused group
    bound to its kernel in the library."""
    import kiln.op  # noqa: F401  (fills the operator table that parsing the saved graph reads)
    from kiln.codegen.func_info import FuncInfo
    from kiln.codegen.module import CFunction
    from kiln.ir.parser import parse
    from kiln.runtime.executor import primitive_functions

    try:
        params = [weights[f"param{i}"] for i in range(meta["num_params"])]
    except (KeyError, TypeError) as e:
        raise ArtifactError(f"{d / GRAPH}: graph parameter {e} is not in the index of {WEIGHTS}") from None
    try:
        mod = parse(meta["graph"], params)
    except KilnError as e:
        raise ArtifactError(f"{d / GRAPH}: the graph does not parse ({e})") from None
    groups = primitive_functions(mod)
    if len(groups) != len(meta["groups"]):
        raise ArtifactError(f"{d / GRAPH}: {len(groups)} fused groups in the graph, {len(meta['groups'])} listed")
    try:
        kernels = {r["name"]: _kernel(r, weights) for r in meta["kernels"]}
        kernel_of = {}
        for fn, name in zip(groups, meta["groups"]):
            if name is not None:
                kernel_of[id(fn)] = kernels[name] = _with_outputs(kernels[name], fn)
        symbols = {r["name"]: r["symbol"] for r in meta["kernels"]}
        return assemble(mod, kernel_of, meta["host_groups"],
                        lambda k: CFunction(FuncInfo(k.func, symbols[k.func.name], ""), library.lib), library,
                        compile_specialized)
    except (KeyError, TypeError, AttributeError) as e:
        raise ArtifactError(f"{d / GRAPH}: the kernel table is inconsistent ({type(e).__name__}: {e})") from None


class LoadedLibrary:
    """A saved model's library, loaded with ctypes (the `path` and `lib` a CModule has)."""

    def __init__(self, path: Path):
        self.path = path.resolve()
        pool = self.path.with_name(POOL_LIBRARY)
        try:
            self.lib = loader.load_library(self.path, pool if pool.exists() else None)
        except (OSError, KilnError) as e:
            raise ArtifactError(f"{path} cannot be loaded ({e})") from None


def _kernel(record: dict[str, Any], weights: dict[str, np.ndarray]) -> Kernel:
    from kiln.codegen.kernel import Kernel
    from kiln.codegen.kernel_signature import decode_signature

    func = decode_signature(record["name"], record["params"])
    return Kernel(func, [weights[c] for c in record["constants"]], record["num_params"], [], func.params)


def _with_outputs(k: Kernel, fn: Function) -> Kernel:
    """Output types come from the group, as lower_primitive derives them."""
    if k.output_types:
        return k
    from kiln.codegen.kernel import Kernel

    types = list(fn.body.type.fields) if isinstance(fn.body, Tuple) else [fn.body.type]
    return Kernel(k.func, k.constants, k.num_params, types, k.signature)
