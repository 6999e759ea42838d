"""Record a sequence of llama-completion runs sharing one --prompt-cache file as a JSON reference.

    LLAMA_BIN=<build>/bin EXIT_DELAY=<exit_delay.so> python record_prompt_cache.py OUT.json \
        STDIN1 ARGS1... -- STDIN2 ARGS2... -- ...

Each step is its piped stdin (escapes such as \n processed; may be empty) and llama-completion's arguments, where the
session file is named `prompt.cache`. The steps run one after the other in one empty temporary folder (so the file
carries over and its name is the same on every machine; a -m path is taken relative to where this is run: run it
from tests/reference). Kept per step: args, stdin, stdout (text, bytes that are no UTF-8 as surrogate escapes),
returncode, and the session file's size and sha256 after the step (null when there is none).
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile

out, rest = sys.argv[1], sys.argv[2:]
steps, cur = [], []
for a in rest + ["--"]:
    if a == "--":
        steps.append(cur)
        cur = []
    else:
        cur.append(a)
env = {**os.environ, "LD_PRELOAD": os.environ["EXIT_DELAY"]}
binary = os.path.join(os.environ["LLAMA_BIN"], "llama-completion")
recs = []
with tempfile.TemporaryDirectory() as tmp:
    for stdin, *args in steps:
        run_args = list(args)
        i = run_args.index("-m") + 1
        run_args[i] = os.path.abspath(run_args[i])
        stdin = stdin.encode().decode("unicode_escape")
        p = subprocess.run([binary, *run_args], input=stdin.encode(), capture_output=True, env=env, cwd=tmp)
        cache = os.path.join(tmp, "prompt.cache")
        data = open(cache, "rb").read() if os.path.exists(cache) else None
        recs.append({"args": args, "stdin": stdin, "stdout": p.stdout.decode("utf-8", "surrogateescape"),
                     "returncode": p.returncode, "cache_size": None if data is None else len(data),
                     "cache_sha256": None if data is None else hashlib.sha256(data).hexdigest()})
with open(out, "w") as f:
    json.dump({"steps": recs}, f, indent=1)
    f.write("\n")
