"""The AOT entry's symbols in a compiled library: the generator (kiln.codegen.aot_source) defines
them and the runtime (kiln.runtime.aot_executor) calls them, so both read the names from here."""

ENTRY = "kiln_model_run"
PROFILE_ENTRY = "kiln_model_profile"
FAILED_CALL = "kiln_model_failed_call"
RUN_FROM_ENTRY = "kiln_model_run_from"  # runs from a step, says where it stopped (preemptible runs)
STEP_ENTRY = "kiln_model_step"  # the dataflow entries (aot_source.generate_dataflow)
STEPS_ENTRY = "kiln_model_steps"
COPY_ENTRY = "kiln_model_copy_outputs"
