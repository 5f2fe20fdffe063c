import numpy as np
import pytest

from kiln.errors import MemoryLimitError
from kiln.ir.aligned import ALIGN
from kiln.runtime.pool_allocator import PoolAllocator


def test_counts_live_and_peak_bytes_and_reuses_freed_blocks():
    pool = PoolAllocator()
    a = pool.allocate((10, 10), np.float32, "a")
    b = pool.allocate((5,), np.float64, "b")
    assert a.shape == (10, 10) and a.dtype == np.float32 and a.ctypes.data % ALIGN == 0
    assert pool.live == 440 and pool.peak_live == 440
    pool.free(a)
    assert pool.live == 40
    c = pool.allocate((90,), np.float32, "c")  # fits a's freed 448-byte block
    assert c.ctypes.data == a.ctypes.data and pool.held == 448 + 64
    pool.free(b)
    pool.free(c)
    assert pool.live == 0 and pool.peak_live == 440 and pool.peak_held == 512


def test_limit_returns_free_blocks_before_failing():
    pool = PoolAllocator(limit=1024)
    pool.free(pool.allocate((128,), np.float32, "a"))  # 512 bytes kept free
    big = pool.allocate((200,), np.float32, "b")  # 800 bytes: the free block goes back first
    assert big.nbytes == 800 and pool.held == 832
    with pytest.raises(MemoryLimitError, match="c needs 256 bytes more while 832 bytes are live"):
        pool.allocate((64,), np.float32, "c")
