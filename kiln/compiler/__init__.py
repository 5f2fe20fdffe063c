"""The compile driver: import -> optimize -> fuse -> lower -> codegen -> link, with one entry, `build`.

Glossary of the compiled objects, from the outside in:
- CompiledModel (kiln.compiler.compiled_model): what `kiln.build` returns (a kiln.runtime.model.Model);
  the optimized, fused module with the executor that runs it, its build report, and `export`.
- AotExecutor (kiln.runtime.aot_executor): a static-shape model as one C entry function
  (`kiln_model_run`) over a planned memory arena; one ctypes call per inference.
- GraphExecutor (kiln.runtime.executor): the fused module run kernel by kernel, Python between
  kernels; serves symbolic dims, control flow and groups that run on the host.
- BoundKernel (kiln.runtime.executor): one lowered kernel bound to its compiled function and to
  where its size parameters come from; the graph executor calls one per fused group.
- Kernel (kiln.codegen.kernel, made by kiln.codegen.lower_fused): a fused group lowered to a tir
  PrimFunc, with its constants and calling signature; not yet compiled.
- CModule / CFunction (kiln.codegen.module): a compiled, loaded C library and one function in it.
- ShapeSpecialized (kiln.runtime.shape_specialized): per-input-shape AOT builds in front of a
  graph executor, for models with symbolic input dims.

The runtime never imports this package: where it compiles at run time (a new input shape, a group
specialized on its small inputs) the driver hands it a callable when it builds the executor.
"""

from kiln.compiler.compiled_model import CompiledModel, TensorInfo  # noqa: F401
from kiln.compiler.driver import build  # noqa: F401
