"""A simulated NPU-style accelerator (in the spirit of TVM's VTA) and Kiln's compiler path onto it.

The machine: `config` (its parameters), `isa` (its instructions), `banks` (the banked input buffer),
`simulator` (functional and cycle-level execution). The compiler: `conv_spec`, `lower_conv`,
`lower_vector` (ops to instruction streams), `tiling` and `cost_model` (which tile), `placement`
(which op runs where), `lower_step`, `kernel`, `executor`, `build` (a model for target kind
"npu-sim"); int8 models: `int8_weights`, `int8_placement`, `int8_lowering`; the CPU steps as C
kernels: `cpu_steps`. The reports: `report`, `effects`, `run_report`, `bench`, `tile_search`.
docs/architecture.md has the table.
"""
