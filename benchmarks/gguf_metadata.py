"""Time to read a GGUF file's metadata and tensor infos: synapse's reader vs gguf-py's GGUFReader; not a test.

Both readers map the file and parse every key/value pair (a Qwen2.5 vocabulary is 151936 tokens and
151387 merges) and every tensor info. synapse's reader is timed best of --repeat (default 5) runs;
gguf-py's once (it takes seconds). Prints the date, the machine, the command and both times.

    .venv/bin/python benchmarks/gguf_metadata.py                       # models/qwen2.5-coder-0.5b-...
    .venv/bin/python benchmarks/gguf_metadata.py models/SmolLM2-135M-Instruct.Q4_1.gguf --no-gguf-py
"""

from __future__ import annotations

from _common import REPO, cpu_name  # first: the repository root on the import path

import argparse
import datetime
import importlib.metadata
import os
import platform
import sys
import time
from pathlib import Path

from kernels.gguf import GGUFReader

DEFAULT = REPO / "models" / "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeat", type=int, default=5, help="synapse reader runs (best is reported)")
    ap.add_argument("--no-gguf-py", action="store_true", help="skip the gguf-py reader")
    args = ap.parse_args()

    path = Path(args.model)
    if not path.is_file():
        sys.exit(f"{path} not found (run `make models`)")
    print(f"date:    {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
          f"Python {platform.python_version()}")
    print(f"command: {' '.join([Path(sys.executable).name] + sys.argv)}")
    print(f"file:    {path.name} ({path.stat().st_size / 2**20:.1f} MiB)")

    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        r = GGUFReader(path)
        times.append(time.perf_counter() - t0)
    print(f"synapse GGUFReader: {min(times) * 1e3:8.1f} ms  (best of {args.repeat}; "
          f"{len(r.fields)} fields, {len(r.tensors)} tensors)")

    if not args.no_gguf_py:
        import gguf

        t0 = time.perf_counter()
        g = gguf.GGUFReader(path)
        dt = time.perf_counter() - t0
        print(f"gguf-py GGUFReader: {dt * 1e3:8.1f} ms  (once; gguf-py {importlib.metadata.version('gguf')}, "
              f"{len(g.fields)} fields, {len(g.tensors)} tensors)")


if __name__ == "__main__":
    main()
