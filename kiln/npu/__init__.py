"""A simulated NPU-style accelerator (in the spirit of TVM's VTA) and Kiln's compiler path onto it.

The layers inside: `config` (the parameterized machine), `isa` (its instructions), `banks` (where a
buffer address lives), `simulator` (functional and cycle-level execution), `tiling` (candidate tiles
and the cost model), `lower_conv` / `lower_vector` (ops to instruction streams), `placement` (which
op runs where), `executor` and `build` (a runnable model for target kind "npu-sim"), `report`.
"""
