/* Tasks for testing Kiln's thread pool through ctypes (tests/codegen/test_pool.py): each records which
 * iterations ran, on which thread, and can fail or cancel its run at a given iteration. */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "kiln_pool.h"

typedef struct {
  int32_t* hits;     /* per iteration: times it ran */
  int64_t* tids;     /* per iteration: the thread that ran it last */
  int32_t* chunks;   /* chunks started */
  int64_t fail_at;   /* this iteration returns fail_code (-1: none) */
  int32_t fail_code;
  int64_t cancel_at; /* this iteration cancels `run` (-1: none) */
  kiln_run_t* run;
  int64_t inner;     /* nested: each iteration launches `inner` iterations of its own */
  int32_t checks;    /* after each iteration, a checkpoint: KILN_PREEMPTED once *ctl->cancel is set */
} counter_t;

static int32_t count_task(void* closure, int64_t begin, int64_t end, kiln_task_ctl_t* ctl) {
  counter_t* c = closure;
  __atomic_add_fetch(c->chunks, 1, __ATOMIC_RELAXED);
  for (int64_t i = begin; i < end; ++i) {
    __atomic_add_fetch(&c->hits[i], 1, __ATOMIC_RELAXED);
    c->tids[i] = (int64_t)syscall(SYS_gettid);
    if (i == c->fail_at) return c->fail_code;
    if (i == c->cancel_at) kiln_run_cancel(c->run);
    if (c->checks && __atomic_load_n(ctl->cancel, __ATOMIC_RELAXED)) {
      ctl->stopped_at = i + 1; /* iteration i finished */
      return KILN_PREEMPTED;
    }
  }
  return 0;
}

int32_t count_launch(counter_t* c, int64_t n, int64_t grain, int32_t flags) {
  return kiln_parallel_launch(count_task, c, n, grain, flags);
}

/* Each outer iteration i launches c->inner iterations that record into hits/tids at i * inner + j. */
static int32_t nest_task(void* closure, int64_t begin, int64_t end, kiln_task_ctl_t* ctl) {
  counter_t* c = closure;
  (void)ctl;
  for (int64_t i = begin; i < end; ++i) {
    counter_t inner = *c;
    inner.hits = c->hits + i * c->inner;
    inner.tids = c->tids + i * c->inner;
    int32_t rc = kiln_parallel_launch(count_task, &inner, c->inner, 1, 0);
    if (rc != 0) return rc;
  }
  return 0;
}

int32_t nest_launch(counter_t* c, int64_t n) { return kiln_parallel_launch(nest_task, c, n, 1, 0); }

int64_t thread_id(void) { return (int64_t)syscall(SYS_gettid); }
