"""Measure this machine's FP32 peak and memory bandwidth: the ceilings Kiln's speed is judged by.

- FMA peak: a C kernel of 12 independent FMA chains per thread on the widest vector the host has
  (16 lanes with AVX-512, else 8), compiled with Kiln's gcc flags; GFLOP/s = 2 * lanes * 12 chains *
  iterations / time.
- int8 dot peak: 12 independent accumulator chains of the int8 dot instruction Kiln's int8 kernels use:
  vpdpbusd on 512-bit vectors with AVX-512 VNNI (64 multiply-adds each), else AVX2's vpmaddubsw +
  vpmaddwd + vpaddd on 256-bit vectors (32 multiply-adds each); GOP/s counts a multiply-add as 2.
- SGEMM ceiling: numpy's BLAS on a large matrix (the practical peak a GEMM can reach here).
- Bandwidth: a C triad a[i] = b[i] + s * c[i] over arrays much larger than the caches (OpenMP).
Prints a table and writes JSON with --json FILE. Threads: 1 and all cores, set explicitly.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from kiln.codegen.compiler import FLAGS, compile_shared
from kiln.target import find_compiler

SOURCE = r"""
#include <omp.h>
#include <stdint.h>
/* the widest vector this host has (what Kiln's kernels use: -march=native, 512-bit preferred) */
#ifdef __AVX512F__
#define LANES 16
#else
#define LANES 8
#endif
typedef float vec __attribute__((vector_size(4 * LANES)));
int fma_lanes(void) { return LANES; }
double fma_peak(int64_t iters, int threads) {
  double t0 = omp_get_wtime();
  float sink = 0.f;
  #pragma omp parallel num_threads(threads) reduction(+:sink)
  {
    /* 12 independent chains: enough to cover 2 FMA ports x 4-5 cycles of latency */
    vec a[12];
    for (int j = 0; j < 12; ++j) a[j] = (vec){} + (1.0f + (float)j);
    const vec m = (vec){} + 0.9999999f, c = (vec){} + 1e-7f;
    for (int64_t i = 0; i < iters; ++i) {
      #pragma GCC unroll 12
      for (int j = 0; j < 12; ++j) a[j] = a[j] * m + c;  /* one FMA (gcc contracts) */
    }
    vec s = a[0];
    for (int j = 1; j < 12; ++j) s += a[j];
    sink += s[0];
  }
  double t = omp_get_wtime() - t0;
  return sink == 12345.f ? -t : t;  /* keep the work observable */
}
#include <immintrin.h>
/* 12 chains of the int8 dot instruction; returns the multiply-adds of one step of one chain */
int int8_macs(void) {
#ifdef __AVX512VNNI__
  return 64;
#else
  return 32;
#endif
}
double int8_peak(int64_t iters, int threads) {
  double t0 = omp_get_wtime();
  int sink = 0;
  #pragma omp parallel num_threads(threads) reduction(+:sink)
  {
#ifdef __AVX512VNNI__
    __m512i acc[12];
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_epi32(j);
    for (int64_t i = 0; i < iters; ++i) {
      #pragma GCC unroll 12
      for (int j = 0; j < 12; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
      __asm__ volatile("" : "+v"(acc[0]));
    }
    for (int j = 1; j < 12; ++j) acc[0] = _mm512_add_epi32(acc[0], acc[j]);
    sink += _mm512_reduce_add_epi32(acc[0]);
#else
    /* 6 chains (6 accumulators, 6 operands, 2 constants: 14 of 16 registers), each operand made opaque
       every step so nothing is hoisted; a step's three instructions are what one 32-MAC step costs */
    __m256i acc[6], a[6];
    const __m256i b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
    for (int j = 0; j < 6; ++j) acc[j] = _mm256_set1_epi32(j), a[j] = _mm256_set1_epi8((char)(j + 1));
    for (int64_t i = 0; i < 2 * iters; ++i) {
      #pragma GCC unroll 6
      for (int j = 0; j < 6; ++j) {
        __asm__ volatile("" : "+x"(a[j]));
        acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(a[j], b), ones));
      }
    }
    for (int j = 1; j < 6; ++j) acc[0] = _mm256_add_epi32(acc[0], acc[j]);
    sink += _mm256_extract_epi32(acc[0], 0);
#endif
  }
  double t = omp_get_wtime() - t0;
  return sink == 12345 ? -t : t;
}
double triad(float* a, const float* b, const float* c, int64_t n, int reps, int threads) {
  double t0 = omp_get_wtime();
  for (int r = 0; r < reps; ++r) {
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
  }
  return omp_get_wtime() - t0;
}
"""


def build() -> ctypes.CDLL:
    tmp = Path(tempfile.mkdtemp(prefix="kiln-limits-"))
    src, lib = tmp / "limits.c", tmp / "limits.so"
    src.write_text(SOURCE)
    compile_shared(src, lib, find_compiler(), FLAGS)
    dll = ctypes.CDLL(str(lib))
    dll.fma_peak.restype, dll.fma_peak.argtypes = ctypes.c_double, [ctypes.c_int64, ctypes.c_int]
    dll.fma_lanes.restype, dll.fma_lanes.argtypes = ctypes.c_int, []
    dll.int8_peak.restype, dll.int8_peak.argtypes = ctypes.c_double, [ctypes.c_int64, ctypes.c_int]
    dll.int8_macs.restype, dll.int8_macs.argtypes = ctypes.c_int, []
    dll.triad.restype = ctypes.c_double
    dll.triad.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int,
                          ctypes.c_int]
    return dll


def fma_gflops(dll: ctypes.CDLL, threads: int, iters: int = 200_000_000) -> float:
    best = min(abs(dll.fma_peak(iters, threads)) for _ in range(3))
    return 2 * dll.fma_lanes() * 12 * iters * threads / best / 1e9


def int8_gops(dll: ctypes.CDLL, threads: int, iters: int = 100_000_000) -> float:
    """The int8 dot instruction's peak (vpdpbusd, else vpmaddubsw + vpmaddwd) in GOP/s."""
    best = min(abs(dll.int8_peak(iters, threads)) for _ in range(3))
    return 2 * dll.int8_macs() * 12 * iters * threads / best / 1e9


def triad_gbs(dll: ctypes.CDLL, threads: int, n: int = 1 << 25) -> float:
    a, b, c = (np.ones(n, np.float32) for _ in range(3))
    reps = 5
    best = min(dll.triad(a.ctypes.data, b.ctypes.data, c.ctypes.data, n, reps, threads) for _ in range(3))
    return 3 * 4 * n * reps / best / 1e9


def sgemm_gflops(n: int = 2048) -> float:
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(3))
    return 2 * n ** 3 / best / 1e9


def _timed(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    dll = build()
    cores = os.cpu_count() or 1
    rows = {}
    for t in sorted({1, cores}):
        rows[f"fma_peak_gflops_{t}t"] = fma_gflops(dll, t)
        rows[f"int8_dot_peak_gops_{t}t"] = int8_gops(dll, t)
        rows[f"triad_gbs_{t}t"] = triad_gbs(dll, t)
    rows["numpy_sgemm_gflops_all_threads"] = sgemm_gflops()
    for k, v in rows.items():
        print(f"{k:34s} {v:10.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
