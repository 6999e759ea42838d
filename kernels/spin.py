"""A spin barrier for the threads of one parallel region (kernels/layer.py's one-region decode, issue #20).

numba starts a parallel region (a prange) through its scheduler: 1.1-2.5 us on a 2-core Zen 4 from compiled
code, empty, and a decoded SmolLM2 token ran ~150 of them (4 products and the attention a layer). Inside ONE
region, threads that meet at a barrier instead pay 0.05-0.3 us each time (`python benchmarks/region_cost.py`;
the VM's speed moved between runs). This module gives
the barrier: an atomic counter of arrivals and a generation number, each on its own cache line of a small int64
array `st` (zeros, 16 elements) that the region's threads share:

    arrive:   old = fetch_add(st[0], 1)
    last:     st[0] = 0; fetch_add(st[8], 1)            (the count is reset before the others are released)
    others:   spin (pause) while st[8] == the generation they arrived in

The seq_cst read-modify-writes order every write a thread made before the barrier before every read another
makes after it (x86: `lock xadd`). A barrier needs all `nt` threads to run at once: callers pass the thread
count numba actually runs the prange on, never more (one thread: every barrier returns at once).
"""

from __future__ import annotations

import kernels.config  # noqa: F401  (NUMBA_CACHE_DIR before numba)

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from kernels.config import jit

ARRIVALS, GENERATION = 0, 8  # st's two counters, 64 bytes apart
STATE_SIZE = 16


def _element_pointer(context, builder, sig, args):
    ary = context.make_array(sig.args[0])(context, builder, args[0])
    return cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]])


@intrinsic
def _fetch_add(typingctx, arr, i):
    """st[i] += 1 atomically (seq_cst); the value before."""
    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig, args)
        return builder.atomic_rmw("add", ptr, ir.Constant(ir.IntType(64), 1), "seq_cst")
    return types.int64(arr, i), codegen


@intrinsic
def _load_acquire(typingctx, arr, i):
    """st[i], an atomic load (acquire): read anew on every spin."""
    def codegen(context, builder, sig, args):
        return builder.load_atomic(_element_pointer(context, builder, sig, args), "acquire", 8)
    return types.int64(arr, i), codegen


@intrinsic
def _pause(typingctx):
    """x86 `pause` in a spin loop (yields the core's pipeline to its sibling, eases the memory order exit)."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        builder.call(fn, [])
        return context.get_dummy_value()
    return types.void(), codegen


@jit
def barrier(st, nt, gen):
    """Wait until all nt threads have called barrier with this generation gen; returns the next generation.
    Every thread starts at generation 0 on a zeroed st."""
    if _fetch_add(st, ARRIVALS) == nt - 1:
        st[ARRIVALS] = 0
        _fetch_add(st, GENERATION)
    else:
        while _load_acquire(st, GENERATION) == gen:
            _pause()
    return gen + 1
