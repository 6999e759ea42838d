"""Bit-level scalar helpers shared by every block format (ggml-impl.h, ggml-quants.c helpers).

* fp16 <-> fp32 via LLVM's `half` type: `fpext`/`fptrunc` are IEEE conversions (round to nearest even),
  which is what ggml's F16C `_cvtss_sh`/`_cvtsh_ss` compute on x86 (and what numpy's astype does), and
  LLVM lowers them to vcvtph2ps/vcvtps2ph, so they vectorise (kernels/fp16.py's, under the short names
  f16_to_f32 / f32_to_f16 the formats use).
* bf16 <-> fp32 exactly as ggml_compute_fp32_to_bf16 / ggml_compute_bf16_to_fp32 (scalar C path).
"""

from __future__ import annotations

from llvmlite import ir

from .. import config  # noqa: F401  (sets NUMBA_CACHE_DIR before numba is imported)
import numpy as np  # noqa: E402
from numba import types  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

from ..config import jit  # noqa: E402
# one definition each, in kernels/fp16.py: the bit cast and the F16 conversions (any integer's low 16 bits)
from ..fp16 import f32_bits, int_to_width  # noqa: E402, F401
from ..fp16 import f16_bits_to_f32_hw as f16_to_f32, f32_to_f16_bits_hw as f32_to_f16  # noqa: E402, F401


@intrinsic
def f32_from_bits(typingctx, u):
    """Reinterpret the low 32 bits of an integer as float32."""
    if not isinstance(u, types.Integer):
        return None
    sig = types.float32(u)

    def codegen(context, builder, sig, args):
        v = int_to_width(builder, args[0], sig.args[0].bitwidth, 32)
        return builder.bitcast(v, ir.FloatType())

    return sig, codegen


@jit
def bf16_to_f32(h):
    """bf16 bit pattern -> float32 (ggml_compute_bf16_to_fp32: shift into the high half)."""
    return f32_from_bits(np.uint32(h) << np.uint32(16))


@jit
def f32_to_bf16(f):
    """float32 -> bf16 bit pattern (ggml_compute_fp32_to_bf16: NaN forced quiet, else round to nearest even)."""
    u = f32_bits(f)
    if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16((u >> np.uint32(16)) | np.uint32(64))
    return np.uint16((u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16))


@jit
def e8m0_to_f32_half(e):
    """ggml_e8m0_to_fp32_half: the E8M0 exponent byte e as 2^(e - 128), half of 2^(e - 127) because ggml's fp4
    levels (kvalues_fp4) are doubled; e < 2 give float32 denormals. (A power of two: exact in bf16 too.)"""
    if e < 2:
        return f32_from_bits(np.uint32(0x00200000) << np.uint32(e))
    return f32_from_bits(np.uint32(e - 1) << np.uint32(23))


@jit
def ue4m3_to_f32_half(x):
    """ggml_ue4m3_to_fp32: the unsigned E4M3 byte x (exponent bias 7, 3 mantissa bits) times 0.5, as above; 0 and
    0x7F (NaN) read as 0. Every value is a multiple of 2^-10 below 2^8: exact in fp16 too."""
    if x == 0 or x == 0x7F:
        return np.float32(0)
    ex = np.int32(x >> 3) & 15
    man = np.int32(x) & 7
    if ex == 0:
        return np.float32(np.float32(man) * np.float32(2.0 ** -10))
    return np.float32(np.float32(8 + man) * np.float32(2.0 ** (ex - 11)))


@jit
def read_u16(buf, off):
    """Little-endian uint16 at byte offset `off` of a uint8 buffer."""
    return np.uint16(np.uint16(buf[off]) | (np.uint16(buf[off + 1]) << np.uint16(8)))


@jit
def read_u32(buf, off):
    """Little-endian uint32 at byte offset `off` of a uint8 buffer."""
    return (np.uint32(buf[off]) | (np.uint32(buf[off + 1]) << np.uint32(8))
            | (np.uint32(buf[off + 2]) << np.uint32(16)) | (np.uint32(buf[off + 3]) << np.uint32(24)))
