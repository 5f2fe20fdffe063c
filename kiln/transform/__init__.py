"""Graph passes (IRModule -> IRModule) and the infrastructure that runs them.

Importing this package registers every pass in PASSES under its command-line name.
"""

from kiln.transform.infra import (PASSES, FunctionPass, ModulePass, Pass, PassContext, PassTiming,  # noqa: F401
                                  PrintIR, Sequential, WellFormedCheck, function_pass, module_pass)
from kiln.transform import basic, cse, fold_constant, fuse_ops, normal_form  # noqa: F401,E402
from kiln.transform import fold_scale_axis, pattern, simplify_expr, simplify_inference  # noqa: F401,E402
from kiln.transform import combine_parallel, layout  # noqa: F401,E402
