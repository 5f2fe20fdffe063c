/* The ABI between generated kernels, the AOT entry and Kiln's thread pool (one shared library per
 * process, loaded with RTLD_GLOBAL before any kernel library, so every kernel library and every
 * session in the process launches into the same workers).
 *
 * Kernels: a PARALLEL loop is lifted into a task function taking a closure struct (the loop's free
 * variables) and a half-open range of iterations; the kernel calls kiln_parallel_launch instead of
 * opening an OpenMP region, and returns any non-zero code the launch returns.
 *
 * Runs: the thread that calls an AOT entry (or a kernel) first binds a run control block to itself
 * with kiln_run_begin. Its launches go to the workers of the partition named there, and check the
 * block's cancel flag at every chunk boundary; tasks read it inside their chunks too, where the
 * code generator put checkpoints. kiln_run_cancel (from any thread) makes the running launch return
 * KILN_PREEMPTED once the chunks already started have finished or stopped at a checkpoint; the AOT
 * entry then stops and reports the step it stopped in, and a later call resumes from that step.
 * Version 2: tasks take a kiln_task_ctl_t, kiln_run_enter_step returns a status, kiln_run_wait,
 * dynamic chunks are balanced over the partition, a resume starts at the first unfinished iteration. */
#ifndef KILN_POOL_H
#define KILN_POOL_H
#include <stdint.h>

#define KILN_POOL_ABI 2
#define KILN_PREEMPTED 1 /* positive: not an error; every error code is negative */

/* What a task is handed besides its range: the run's cancel flag, to read (a relaxed atomic load)
 * at the checkpoints the code generator put inside the chunk, and where to say how far it got when
 * it stops at one: iterations [begin, stopped_at) finished. */
typedef struct kiln_task_ctl {
  const int32_t* cancel;
  int64_t stopped_at;
} kiln_task_ctl_t;

/* Run one chunk, iterations [begin, end) of the lifted loop. KILN_OK, an error code, or
 * KILN_PREEMPTED where the task saw *ctl->cancel set at a checkpoint (having set ctl->stopped_at;
 * a resumed RESUMABLE launch starts there). */
typedef int32_t (*kiln_task_fn)(void* closure, int64_t begin, int64_t end, kiln_task_ctl_t* ctl);

/* Launch flags. RESUMABLE: the task writes only buffers that outlive the kernel (its parameters),
 * so after a preemption a resumed launch may skip the chunks that had finished. Without it a
 * resumed kernel re-runs the whole launch (safe: a kernel never writes what it reads). */
#define KILN_LAUNCH_RESUMABLE 1

/* Run fn over [0, n) on the calling thread's partition (the caller works too). grain 0: static
 * chunking, one contiguous range per worker; grain g > 0: dynamic chunks of about g iterations
 * (near-equal, a multiple of the partition's cores in number, at most 16 per core), taken by
 * whichever worker is free. Returns KILN_OK, the first error a chunk returned, or KILN_PREEMPTED.
 * Without a bound run (or with a partition of one core) it runs every chunk on the caller. */
int32_t kiln_parallel_launch(kiln_task_fn fn, void* closure, int64_t n, int64_t grain, int32_t flags);

/* Run control: one block per run in flight; opaque to kernels. */
typedef struct kiln_run kiln_run_t;
kiln_run_t* kiln_run_new(void);
void kiln_run_free(kiln_run_t* run);
/* Bind run to the calling thread: its launches use cores [first_core, first_core + num_cores) of
 * the pool. Clears a cancel that was not yet seen. */
void kiln_run_begin(kiln_run_t* run, int32_t first_core, int32_t num_cores);
void kiln_run_end(void);
/* From any thread: the bound run's launches return KILN_PREEMPTED at their next chunk boundary. */
void kiln_run_cancel(kiln_run_t* run);
/* From any thread: wait up to timeout_us for `run` to stop (a launch or step boundary returned
 * KILN_PREEMPTED) or end (kiln_run_end); a run not begun counts as stopped. Returns when it did, in
 * CLOCK_MONOTONIC nanoseconds, or 0 if it is still running. */
int64_t kiln_run_wait(kiln_run_t* run, int64_t timeout_us);
/* Called by the AOT entry before each kernel call: launches are numbered within a step, so a
 * resumed step can find the launch that was preempted (and, if RESUMABLE, its finished chunks).
 * A checkpoint: KILN_PREEMPTED when the bound run was cancelled (the entry stops before the step),
 * else KILN_OK. */
int32_t kiln_run_enter_step(int32_t step);

int32_t kiln_pool_abi(void); /* KILN_POOL_ABI of the loaded library */
#endif
