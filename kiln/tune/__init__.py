"""Auto-tuning: search the knobs of each fused group's schedule for the fastest config on this machine.

tasks       the distinct tunable groups of a model and their workload keys
candidates  configs -> lowered, compiled kernels;  measure/runner: timed in a child process
features    what a candidate's config and loop nest look like;  cost_model: boosted trees on them
search      annealing + epsilon-greedy proposals;  allocate: which task gets the next batch
state       what is known per task;  tuner: the loop;  records: the JSON-lines log builds read
apply       builds schedule each group with its record's config;  progress: `kiln tune`'s lines
            (the command itself is kiln/tune_command.py, above this library)
"""
