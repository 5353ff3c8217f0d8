"""How the analysing process takes memory: small pages, one allocator.

Measured on the 2-core KVM guest of benchmarks/measurements ("Analysis speed"): of a ``perfkit analyze`` of 4
workers x 200k steps, more CPU time went to the kernel than to the analysis (5.1 s system against 3.4 s
user). NumPy advises huge pages for every array of 4 MB or more (``madvise(MADV_HUGEPAGE)``); where the
kernel's THP ``defrag`` setting is ``madvise`` (its default) and no huge page is free, each first touch of
such an array stalls in synchronous compaction (numpy/numpy#31590); pyarrow's mimalloc pool stalled the
same way reading the run's tables (2.7 s of system time for 100 MB of Parquet, 0.2 s with the system
allocator). With huge pages not advised and Arrow on the system allocator, the same analysis took 0.8 s of
system time. Only the analysing process is changed; training processes keep the libraries' defaults.
"""

from __future__ import annotations

import os


def small_pages() -> None:
    """Apply the settings above to this process (a user's ``NUMPY_MADVISE_HUGEPAGE`` or
    ``ARROW_DEFAULT_MEMORY_POOL`` is left as set). Call before the run's tables are read."""
    if "NUMPY_MADVISE_HUGEPAGE" not in os.environ:
        try:
            from numpy._core import multiarray

            multiarray._set_madvise_hugepage(False)
        except (ImportError, AttributeError):  # another NumPy: its default stays
            pass
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())
