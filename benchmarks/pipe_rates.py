"""How many 512-bit operations of the prompt kernels this CPU issues a cycle, alone and in pairs (issue #20).

The prompt products and attention are bounded by their instructions, not by memory: the Q4_1 / Q5_1 / Q8_0 gemms
(kernels/quants/q32.py) run per 32-weight block and (16 rows, token) ggml's x86 float order, 8 `vpdpbusd`, 8
`vcvtdq2ps`, 8 FMAs and two more multiplies; the batch attention's V step (kernels/flash_attn_rows.py) an FMA
and an F16 round trip (`vcvtps2ph` + `vcvtph2ps`) per 16 lanes. Which of them share an execution port decides
the floor. Each case is a C loop of independent chains (no chain waits on its own latency), compiled with the
system's C compiler (`-O2 -march=native`) into its own program and run on one core; the core's cycles per TSC
tick come from a chain of dependent adds (one a cycle).

    python benchmarks/pipe_rates.py [--cc cc]

Prints core cycles per loop step of each case (a step issues every operation of the case once per chain, and
the cycles are divided by the chains) and the core clock. Needs AVX-512 VNNI; prints why not where it lacks it
or a C compiler. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

CHAINS = 8  # independent chains a case (each op's latency <= 7 cycles at one a cycle: enough to hide it)

# name: the body of one chain's step in C (j: the chain), on __m512i i{j}, __m512 f{j}; w, a, d, x: loop inputs
CASES = {
    "vpdpbusd": "i{j} = _mm512_dpbusd_epi32(i{j}, w, a);",
    "vfmadd": "f{j} = _mm512_fmadd_ps(d, x, f{j});",
    "vcvtdq2ps": "f{j} = _mm512_cvtepi32_ps(_mm512_castps_si512(f{j}));",
    "vpdpbusd + vfmadd": "i{j} = _mm512_dpbusd_epi32(i{j}, w, a); f{j} = _mm512_fmadd_ps(d, x, f{j});",
    "vpdpbusd + vcvtdq2ps": "i{j} = _mm512_dpbusd_epi32(i{j}, w, a); "
                            "f{j} = _mm512_cvtepi32_ps(_mm512_castps_si512(f{j}));",
    "vfmadd + vcvtdq2ps": "f{j} = _mm512_fmadd_ps(d, x, _mm512_cvtepi32_ps(_mm512_castps_si512(f{j})));",
    "vpdpbusd + vcvtdq2ps + vfmadd (Q4_1 lane)":
        "f{j} = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_castps_si512(f{j}), w, a)), f{j});",
    "vcvtps2ph + vcvtph2ps": "f{j} = _mm512_cvtph_ps(_mm512_cvtps_ph(f{j}, 0));",
    "vfmadd + vcvtps2ph + vcvtph2ps (V step)": "f{j} = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_fmadd_ps(d, x, f{j}), 0));",
}

STEPS = 20_000_000


def _program(body: str) -> str:
    chains = "\n".join(f"    __m512i i{j} = _mm512_set1_epi32({j + 1}); __m512 f{j} = _mm512_set1_ps({j + 1}.25f);"
                       for j in range(CHAINS))
    step = " ".join(body.format(j=j) for j in range(CHAINS))
    fold = " ".join(f"s += _mm512_reduce_add_epi32(i{j}); t += _mm512_reduce_add_ps(f{j});" for j in range(CHAINS))
    return f"""#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <x86intrin.h>
#define KEEP(v) __asm__ volatile("" : "+v"(v))
int main(void) {{
    __m512i w = _mm512_set1_epi32(0x01020304), a = _mm512_set1_epi32(0x05060708);
    __m512 d = _mm512_set1_ps(0.999f), x = _mm512_set1_ps(0.001f);
{chains}
    uint64_t t0 = __rdtsc();
    for (long k = 0; k < {STEPS}L; k++) {{
        KEEP(w); KEEP(a); KEEP(d); KEEP(x);  /* loop inputs the compiler cannot hoist or fold */
        {step}
    }}
    uint64_t t1 = __rdtsc();
    long s = 0; float t = 0;
    {fold}
    printf("%.6f %ld %g\\n", (double)(t1 - t0) / {STEPS}L / {CHAINS}, s, t);
    return 0;
}}
"""


_CLOCK = f"""#include <stdio.h>
#include <stdint.h>
#include <x86intrin.h>
int main(void) {{
    uint64_t v = 0, t0 = __rdtsc();
    for (long k = 0; k < {STEPS * 10}L; k++)
        __asm__ volatile("add $1, %0\\n\\tadd $1, %0\\n\\tadd $1, %0\\n\\tadd $1, %0" : "+r"(v));
    printf("%.6f\\n", 4.0 * {STEPS * 10}L / (double)(__rdtsc() - t0));
    return 0;
}}
"""


def _run(cc: str, src: str, tmp: str, name: str) -> float:
    c, exe = os.path.join(tmp, name + ".c"), os.path.join(tmp, name)
    with open(c, "w") as f:
        f.write(src)
    subprocess.run([cc, "-O2", "-march=native", "-o", exe, c], check=True, capture_output=True)
    return float(subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split()[0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", default="cc")
    args = ap.parse_args()
    flags = open("/proc/cpuinfo").read()
    if "avx512_vnni" not in flags:
        sys.exit("pipe_rates: this CPU has no AVX-512 VNNI")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            per_tick = _run(args.cc, _CLOCK, tmp, "clock")
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit(f"pipe_rates: cannot build with {args.cc!r}: {e}")
        print(f"# {time.strftime('%H:%M', time.gmtime())} UTC, one core at {per_tick * _tsc_ghz():.2f} GHz "
              f"({per_tick:.3f} cycles a TSC tick), {CHAINS} chains a case: core cycles a chain's step")
        for i, (name, body) in enumerate(CASES.items()):
            ticks = _run(args.cc, _program(body), tmp, f"case{i}")
            print(f"{name:45s} {ticks * per_tick:6.2f}")


def _tsc_ghz() -> float:
    """The TSC's rate as /proc/cpuinfo's first 'cpu MHz' (on these VMs the TSC's; on bare metal the current clock,
    so the printed GHz is then approximate: the cycles a step do not depend on it)."""
    for line in open("/proc/cpuinfo"):
        if line.startswith("cpu MHz"):
            return float(line.split(":")[1]) / 1000
    return float("nan")


if __name__ == "__main__":
    main()
