"""Graph passes (IRModule -> IRModule) and the infrastructure that runs them.

Importing this package registers every pass in PASSES under its command-line name.
"""

from kiln.transform import (  # noqa: F401,E402  # noqa: F401,E402  # noqa: F401,E402  # noqa: F401,E402
                                  attention_heads,
                                  basic,
                                  combine_parallel,
                                  conv1d,
                                  conv_transpose,
                                  cse,
                                  fast_math,
                                  fold_constant,
                                  fold_scale_axis,
                                  fuse_ops,
                                  int8_ops,
                                  layout,
                                  mixed_precision,
                                  normal_form,
                                  pack_dense,
                                  pattern,
                                  rnn_projection,
                                  simplify_expr,
                                  simplify_inference,
)
from kiln.transform.infra import (  # noqa: F401
                                  PASSES,
                                  FunctionPass,
                                  ModulePass,
                                  Pass,
                                  PassContext,
                                  PassTiming,
                                  PrintIR,
                                  Sequential,
                                  WellFormedCheck,
                                  function_pass,
                                  module_pass,
)
