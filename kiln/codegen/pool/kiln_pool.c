/* Kiln's thread pool: the implementation of kiln_pool.h (one library per process, loaded with
 * RTLD_GLOBAL before any kernel library; kiln/codegen/pool_library.py builds and loads it).
 *
 * Workers. One persistent pthread per core of the pool, created the first time a launch needs it
 * and kept for the life of the process. Worker i serves core i; with pinning it runs only on the
 * i-th CPU this process may use. Core 0 has no worker: the thread that launches always works
 * itself, as slot 0 of its partition. A worker with nothing to do spins for `spin_us`
 * microseconds, then sleeps on a futex until a launch posts work to it.
 *
 * Partitions. kiln_run_begin binds a run to the calling thread with cores [first, first + num):
 * its launches run on the caller plus the workers of cores first+1 .. first+num-1, never on
 * another partition's workers, so two threads with disjoint partitions run side by side. Where
 * partitions overlap (more sessions than cores), a launch posts to a worker only if that worker's
 * mailbox is empty, and takes back at the end what no worker picked up: a busy worker never
 * delays a launch, it only gives it fewer hands.
 *
 * Chunks. A launch splits [0, n) into near-equal contiguous ranges, numbered: grain 0 gives one
 * range per slot of the partition (static); grain g gives ceil(n / g) ranges, at most
 * MAX_CHUNKS_PER_SLOT per slot, rounded up to a multiple of the slots (dynamic). The rounding is
 * for balance: chunks of g (53 + 53 + 22 iterations in the BERT encoder's first dense layer) on 2
 * threads leave one thread 75 iterations to do while the other stops after 53, 17% over OpenMP's
 * even halves; 4 ranges of 32 end together. The cap is for the chunk counter: every take is an
 * atomic add on a line the other cores write too, and the grain, estimated from operation counts,
 * can make chunks of a few microseconds (resnet18: 512 chunks of one iteration in one launch);
 * chunks of several iterations then keep a checkpoint per iteration. Every participant takes the
 * next chunk number from one atomic counter, so whoever is free works (a late worker's static
 * range is done by the caller). Before taking a chunk a participant checks the launch's stop flag
 * (an error) and the run's cancel flag: these are the checkpoints. Inside a chunk the task reads the cancel flag too, through the pointer it is given,
 * at the loop iterations kiln.codegen.c_launch marks (those of tens of thousands of operations), and
 * returns KILN_PREEMPTED there: a chunk of one long iteration would otherwise make a cancel wait
 * for all of it. The launch returns when every taken chunk has returned.
 *
 * Results. The first non-zero code a chunk returns is the launch's result, and no chunk starts
 * after it. A cancel seen at a checkpoint stops the launch: KILN_PREEMPTED, unless every chunk
 * had already been taken (then it completed, and the next launch of the run stops at once).
 *
 * Resuming. Chunks are taken in order and a checkpoint comes before the take, so when a launch
 * stops, the finished iterations include the prefix [0, done): done is the first iteration of the
 * first chunk not taken, or lower, where a task stopped inside a chunk (it says where: iterations
 * [begin, stopped_at) of its chunk finished). Iterations after `done` that finished run again on a
 * resume, which is safe as re-running an earlier launch is, below. The run block records the step
 * (kiln_run_enter_step), the launch's ordinal within the step, its size and `done`. When the same
 * step runs again, launches are counted again from 0: the earlier ones re-run in full (they refill
 * the kernel's local scratch buffers, which did not survive the stop); the recorded one, if its
 * flags say RESUMABLE and its size is the same, runs iterations [done, n) only, chunked afresh
 * (on whatever partition the run has now); the record clears when that launch completes or
 * another step is entered. So a run preempted again and again still moves on by every iteration
 * that finished in between, not only by whole chunks.
 * Why skipping is safe:
 *  - a kernel never writes what it reads (the memory plan gives outputs their own storage), so
 *    re-running earlier launches recomputes exactly the values they wrote before;
 *  - a RESUMABLE launch writes only the kernel's parameters (buffers that outlive the kernel) and
 *    scratch it allocates per iteration, and nothing else in the kernel writes those parameters
 *    (kiln.codegen.c_launch decides): its finished chunks' results are still in place and final;
 *  - an iteration a task stopped inside runs again from its start, rewriting whatever it wrote
 *    before the stop;
 *  - a kernel returns as soon as a launch returns non-zero, so nothing ran after the stop;
 *  - the memory plan keeps a stopped run's live tensors: the arena is not reused until the run
 *    completes or is abandoned.
 * A run block belongs to one model run: a fresh run takes a fresh block (kiln_run_new), or its
 * record of a stopped launch would apply to the new run's step of the same number.
 *
 * Threads without a run. A launch from a thread that has no bound run runs every iteration on the
 * caller, in one call: a kernel called outside an executor (a test, the tuner) is serial. A
 * launch from inside a task (a task that launches) also runs serially inside that task, and its
 * chunks are part of the enclosing chunk (no checkpoints of its own).
 *
 * Waiting for a stop. A run is busy from kiln_run_begin until a launch or a step boundary stops it
 * at a cancel, or kiln_run_end: then it stamps the time and wakes kiln_run_wait. So the thread that
 * asked for the stop (a server's real-time lane) learns that the cores are free without waiting for
 * the stopped run's thread to get back into Python (behind the GIL, hundreds of microseconds).
 *
 * Steps. kiln_run_enter_step is a checkpoint too: the AOT entry stops before a step when the run
 * was cancelled, so a cancel during a kernel that launches nothing (a serial one) is seen when it
 * ends rather than at the next launch.
 *
 * Beyond kiln_pool.h this library exports kiln_pool_configure and kiln_pool_cores for Kiln's
 * runtime object (kiln/runtime/thread_pool.py, through ctypes). Linux only (futex, affinity). */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifndef KILN_POOL_H
#include "kiln_pool.h"
#endif

#define KILN_POOL_OK 0
#define KILN_POOL_BAD_ARG (-3) /* kiln_runtime.h's runtime-library code for an invalid argument */
#define MAX_CORES 1024
#define DEFAULT_SPIN_US 25
#define WAIT_SPINS_BEFORE_YIELD 4096
#define MAX_CHUNKS_PER_SLOT 16

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

/* NOTE: the counters that every participant writes sit on cache lines of their own: on the line
 * that holds fn, closure and the sizes (read for every chunk) the chunk counter's writes would make
 * each of those reads a miss. */
typedef struct job {
  kiln_task_fn fn;
  void* closure;
  int64_t base, n, nchunks;             /* chunks of [base, n): a resumed launch starts at base */
  const int32_t* cancel;                /* the bound run's cancel flag, as tasks read it */
  _Alignas(64) _Atomic int64_t next;    /* the next chunk to take */
  _Alignas(64) _Atomic int64_t aborted; /* the first iteration a task did not finish (n: none) */
  _Atomic int32_t rc;                   /* the first error a chunk returned */
  _Atomic int32_t stop;                 /* an error or a cancel was seen: no chunk starts any more */
  _Alignas(64) _Atomic int32_t holders; /* workers that took this job from their mailbox, not left yet */
} job_t;

typedef struct {
  _Alignas(64) _Atomic(job_t*) mailbox; /* a posted job not yet taken */
  _Atomic uint32_t wake;                /* futex word: bumped by every post */
  _Atomic int32_t sleeping;
  int32_t core;
  pthread_t thread;
} worker_t;

struct kiln_run {
  _Atomic int32_t cancel;
  _Atomic uint32_t busy;   /* futex word: 1 from kiln_run_begin until the run stops or ends */
  _Atomic int32_t waiters;  /* threads in kiln_run_wait: only then does a halt make the futex call */
  _Atomic int64_t halted_ns; /* CLOCK_MONOTONIC when it last stopped or ended */
  int32_t first, num;      /* the partition */
  int32_t step, launches;  /* the step entered last, launches started in it */
  int32_t stopped;         /* a record of a stopped launch follows */
  int32_t stop_step, stop_launch;
  int64_t stop_n, stop_done;
};

static _Atomic(worker_t*) workers[MAX_CORES];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int32_t pool_cores = 0; /* 0: not configured, the CPUs this process may use */
static _Atomic int32_t spin_us = DEFAULT_SPIN_US;
static _Atomic int32_t pin = 0;
static __thread kiln_run_t* bound_run = NULL;
static __thread int32_t in_task = 0;
static const int32_t never_cancelled = 0; /* what tasks of a launch without a run read */

static int32_t allowed_cpus(cpu_set_t* set) {
  CPU_ZERO(set);
  if (sched_getaffinity(0, sizeof(*set), set) != 0) return 1;
  int32_t count = CPU_COUNT(set);
  return count > 0 ? count : 1;
}

static int32_t cores(void) {
  int32_t c = atomic_load_explicit(&pool_cores, memory_order_relaxed);
  if (c > 0) return c;
  cpu_set_t set;
  c = allowed_cpus(&set);
  return c < MAX_CORES ? c : MAX_CORES;
}

/* Worker `core` on the core-th CPU this process may use (wrapping), or on all of them. */
static void place(worker_t* w, int32_t pinned) {
  cpu_set_t allowed, one;
  int32_t count = allowed_cpus(&allowed);
  if (!pinned) {
    pthread_setaffinity_np(w->thread, sizeof(allowed), &allowed);
    return;
  }
  int32_t want = w->core % count, seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    if (seen++ == want) {
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      pthread_setaffinity_np(w->thread, sizeof(one), &one);
      return;
    }
  }
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void futex(_Atomic uint32_t* word, int op, uint32_t value) {
  syscall(SYS_futex, (uint32_t*)word, op, value, NULL, NULL, 0);
}

/* The run holds no core any more (a launch or a step boundary stopped it, or it ended): stamp the
 * time and wake kiln_run_wait. */
static void halt(kiln_run_t* run) {
  if (atomic_load_explicit(&run->busy, memory_order_relaxed) == 0) return;
  atomic_store(&run->halted_ns, now_ns());
  atomic_store(&run->busy, 0);
  /* NOTE: sequentially consistent with kiln_run_wait, which counts itself in, then reads `busy`:
   * either this sees the waiter, or the waiter sees the run stopped */
  if (atomic_load(&run->waiters) > 0) futex(&run->busy, FUTEX_WAKE_PRIVATE, INT_MAX);
}

static void chunk_range(const job_t* j, int64_t c, int64_t* begin, int64_t* end) {
  int64_t size = j->n - j->base, q = size / j->nchunks, r = size % j->nchunks;
  *begin = j->base + c * q + (c < r ? c : r);
  *end = *begin + q + (c < r ? 1 : 0);
}

/* Chunks of a launch of n iterations on `slots` threads (see "Chunks" above). */
static int64_t chunk_count(int64_t n, int64_t grain, int32_t slots) {
  if (grain <= 0) return n < slots ? n : slots;
  int64_t c = (n - 1) / grain + 1;
  if (c > (int64_t)MAX_CHUNKS_PER_SLOT * slots) c = (int64_t)MAX_CHUNKS_PER_SLOT * slots;
  c = (c + slots - 1) / slots * slots;
  return c < n ? c : n;
}

static void lower_to(_Atomic int64_t* value, int64_t c) {
  int64_t seen = atomic_load_explicit(value, memory_order_relaxed);
  while (c < seen && !atomic_compare_exchange_weak(value, &seen, c)) {
  }
}

/* Take chunks until none is left, a chunk failed, or the run is cancelled. */
static void participate(job_t* j) {
  int32_t outer = in_task;
  in_task = 1;
  for (;;) {
    if (atomic_load_explicit(&j->stop, memory_order_relaxed)) break;
    if (__atomic_load_n(j->cancel, __ATOMIC_RELAXED)) {
      atomic_store_explicit(&j->stop, 1, memory_order_relaxed);
      break;
    }
    int64_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
    if (c >= j->nchunks) break;
    int64_t begin, end;
    chunk_range(j, c, &begin, &end);
    kiln_task_ctl_t ctl = {.cancel = j->cancel, .stopped_at = begin};
    int32_t rc = j->fn(j->closure, begin, end, &ctl);
    if (rc == KILN_PREEMPTED) { /* stopped inside the chunk at a cancel */
      lower_to(&j->aborted, ctl.stopped_at < begin ? begin : ctl.stopped_at < end ? ctl.stopped_at : end);
      atomic_store_explicit(&j->stop, 1, memory_order_relaxed);
    } else if (rc != KILN_POOL_OK) {
      int32_t none = KILN_POOL_OK;
      atomic_compare_exchange_strong(&j->rc, &none, rc);
      atomic_store_explicit(&j->stop, 1, memory_order_relaxed);
    }
  }
  in_task = outer;
}

static void wait_for_post(worker_t* w) {
  double deadline = now_us() + atomic_load_explicit(&spin_us, memory_order_relaxed);
  for (uint32_t k = 1;; ++k) {
    if (atomic_load_explicit(&w->mailbox, memory_order_relaxed) != NULL) return;
    CPU_RELAX();
    if ((k & 63) == 0 && now_us() >= deadline) break;
  }
  /* NOTE: sequentially consistent on both sides: a poster fills the mailbox, bumps `wake`, then reads
   * `sleeping`; this thread reads `wake`, sets `sleeping`, then reads the mailbox. Either it sees the
   * post, or the poster sees it asleep and wakes it, or the futex finds `wake` changed. */
  uint32_t seen = atomic_load(&w->wake);
  atomic_store(&w->sleeping, 1);
  if (atomic_load(&w->mailbox) == NULL) futex(&w->wake, FUTEX_WAIT_PRIVATE, seen);
  atomic_store(&w->sleeping, 0);
}

static void* worker_main(void* arg) {
  worker_t* w = arg;
  for (;;) {
    job_t* j = atomic_exchange(&w->mailbox, NULL);
    if (j == NULL) {
      wait_for_post(w);
      continue;
    }
    participate(j);
    atomic_fetch_sub_explicit(&j->holders, 1, memory_order_release);
  }
  return NULL;
}

static worker_t* worker(int32_t core) {
  worker_t* w = atomic_load_explicit(&workers[core], memory_order_acquire);
  if (w != NULL) return w;
  pthread_mutex_lock(&pool_lock);
  w = atomic_load_explicit(&workers[core], memory_order_acquire);
  if (w == NULL) {
    w = aligned_alloc(64, (sizeof(worker_t) + 63) / 64 * 64);
    if (w != NULL) {
      memset(w, 0, sizeof(*w));
      w->core = core;
      if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        free(w);
        w = NULL;
      } else {
        pthread_detach(w->thread);
        place(w, atomic_load(&pin));
        atomic_store_explicit(&workers[core], w, memory_order_release);
      }
    }
  }
  pthread_mutex_unlock(&pool_lock);
  return w; /* NULL when no thread could be started: the launch runs with fewer hands */
}

static void post(worker_t* w, job_t* j) {
  atomic_fetch_add(&j->holders, 1);
  job_t* empty = NULL;
  if (!atomic_compare_exchange_strong(&w->mailbox, &empty, j)) {
    atomic_fetch_sub(&j->holders, 1); /* busy with another partition's post: do without it */
    return;
  }
  atomic_fetch_add(&w->wake, 1);
  if (atomic_load(&w->sleeping)) futex(&w->wake, FUTEX_WAKE_PRIVATE, 1);
}

/* Take back a post no worker picked up, then wait for the workers that did. */
static void collect(worker_t** posted, int32_t count, job_t* j) {
  for (int32_t i = 0; i < count; ++i) {
    job_t* mine = j;
    if (atomic_compare_exchange_strong(&posted[i]->mailbox, &mine, NULL)) atomic_fetch_sub(&j->holders, 1);
  }
  for (uint32_t k = 1; atomic_load_explicit(&j->holders, memory_order_acquire) > 0; ++k) {
    if (k % WAIT_SPINS_BEFORE_YIELD == 0) sched_yield();
    else CPU_RELAX();
  }
}

static int32_t is_record_of(const kiln_run_t* run, int32_t launch) {
  return run->stopped && run->stop_step == run->step && run->stop_launch == launch;
}

int32_t kiln_parallel_launch(kiln_task_fn fn, void* closure, int64_t n, int64_t grain, int32_t flags) {
  if (n <= 0) return KILN_POOL_OK;
  kiln_run_t* run = bound_run;
  kiln_task_ctl_t ctl = {.cancel = run == NULL ? &never_cancelled : (const int32_t*)&run->cancel};
  if (run == NULL || in_task) return fn(closure, 0, n, &ctl);
  int32_t launch = run->launches++, total = cores();
  int32_t first = run->first < total ? run->first : total - 1;
  int32_t slots = run->num < total - first ? run->num : total - first;
  if (slots < 1) slots = 1;
  int64_t base = 0;
  if (is_record_of(run, launch) && (flags & KILN_LAUNCH_RESUMABLE) && run->stop_n == n) base = run->stop_done;
  job_t j = {.fn = fn, .closure = closure, .base = base, .n = n, .nchunks = chunk_count(n - base, grain, slots),
             .cancel = (const int32_t*)&run->cancel};
  atomic_init(&j.next, 0);
  atomic_init(&j.aborted, n);
  worker_t* posted[MAX_CORES];
  int32_t count = 0;
  int64_t helpers = j.nchunks - 1 < slots - 1 ? j.nchunks - 1 : slots - 1;
  for (int32_t i = 1; i <= helpers; ++i) {
    worker_t* w = worker(first + i);
    if (w == NULL) continue;
    post(w, &j);
    posted[count++] = w;
  }
  participate(&j);
  collect(posted, count, &j);
  int32_t rc = atomic_load(&j.rc);
  if (rc != KILN_POOL_OK) return rc;
  int64_t taken = atomic_load(&j.next), done = atomic_load(&j.aborted), begin, end;
  if (taken < j.nchunks) {
    chunk_range(&j, taken, &begin, &end);
    done = begin < done ? begin : done;
  }
  if (done < n) { /* stopped by a cancel: iterations [0, done) have finished */
    run->stopped = 1;
    run->stop_step = run->step;
    run->stop_launch = launch;
    run->stop_n = n;
    run->stop_done = done;
    halt(run);
    return KILN_PREEMPTED;
  }
  if (is_record_of(run, launch)) run->stopped = 0;
  return KILN_POOL_OK;
}

kiln_run_t* kiln_run_new(void) {
  kiln_run_t* run = calloc(1, sizeof(kiln_run_t));
  if (run != NULL) {
    run->num = 1;
    run->step = -1;
    atomic_init(&run->halted_ns, now_ns()); /* not begun: stopped */
  }
  return run;
}

void kiln_run_free(kiln_run_t* run) {
  if (bound_run == run) bound_run = NULL;
  free(run);
}

void kiln_run_begin(kiln_run_t* run, int32_t first_core, int32_t num_cores) {
  run->first = first_core > 0 ? first_core : 0;
  run->num = num_cores > 0 ? num_cores : 1;
  run->launches = 0;
  atomic_store(&run->cancel, 0);
  atomic_store(&run->busy, 1);
  bound_run = run;
}

void kiln_run_end(void) {
  if (bound_run != NULL) halt(bound_run);
  bound_run = NULL;
}

int64_t kiln_run_wait(kiln_run_t* run, int64_t timeout_us) {
  int64_t deadline = now_ns() + timeout_us * 1000, halted = 0;
  atomic_fetch_add(&run->waiters, 1);
  for (;;) {
    if (atomic_load(&run->busy) == 0) {
      halted = atomic_load(&run->halted_ns);
      break;
    }
    int64_t left = deadline - now_ns();
    if (left <= 0) break;
    struct timespec t = {.tv_sec = left / 1000000000, .tv_nsec = left % 1000000000};
    syscall(SYS_futex, (uint32_t*)&run->busy, FUTEX_WAIT_PRIVATE, 1u, &t, NULL, 0);
  }
  atomic_fetch_sub(&run->waiters, 1);
  return halted;
}

void kiln_run_cancel(kiln_run_t* run) { atomic_store(&run->cancel, 1); }

int32_t kiln_run_enter_step(int32_t step) {
  kiln_run_t* run = bound_run;
  if (run == NULL) return KILN_POOL_OK;
  if (run->stopped && run->stop_step != step) run->stopped = 0;
  run->step = step;
  run->launches = 0;
  if (!atomic_load_explicit(&run->cancel, memory_order_relaxed)) return KILN_POOL_OK;
  halt(run);
  return KILN_PREEMPTED;
}

int32_t kiln_pool_abi(void) { return KILN_POOL_ABI; }

/* The pool's size (cores, so workers 1..cores-1), how long an idle worker spins before it sleeps,
 * and whether worker i runs only on the i-th allowed CPU. Workers already started keep running;
 * their placement follows `pinned` at once. KILN_POOL_BAD_ARG for a size outside [1, MAX_CORES]
 * or a negative spin. */
int32_t kiln_pool_configure(int32_t num_cores, int32_t spin, int32_t pinned) {
  if (num_cores < 1 || num_cores > MAX_CORES || spin < 0) return KILN_POOL_BAD_ARG;
  pthread_mutex_lock(&pool_lock);
  atomic_store(&pool_cores, num_cores);
  atomic_store(&spin_us, spin);
  if (atomic_exchange(&pin, pinned != 0) != (pinned != 0)) {
    for (int32_t i = 0; i < MAX_CORES; ++i) {
      worker_t* w = atomic_load(&workers[i]);
      if (w != NULL) place(w, pinned != 0);
    }
  }
  pthread_mutex_unlock(&pool_lock);
  return KILN_POOL_OK;
}

int32_t kiln_pool_cores(void) { return cores(); }

/* A forked child has none of the parent's threads: it starts its own workers when it launches. */
static void forget_workers(void) {
  for (int32_t i = 0; i < MAX_CORES; ++i) atomic_store(&workers[i], NULL);
  pthread_mutex_init(&pool_lock, NULL);
}

__attribute__((constructor)) static void register_fork_handler(void) {
  pthread_atfork(NULL, NULL, forget_workers);
}
