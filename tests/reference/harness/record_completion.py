"""Record one llama-completion run as a JSON reference: {"args", "stdin", "stdout"}.

    LLAMA_BIN=<build>/bin EXIT_DELAY=<exit_delay.so> python record_completion.py OUT.json STDIN -- ARGS...

STDIN is the text piped to llama-completion (may be empty; escapes such as \n processed); ARGS are all its arguments.
Run from tests/reference. stdout is stored as text, bytes that are no UTF-8 as surrogate escapes (read it back with
.encode("utf-8", "surrogateescape")). With STDERR_FROM=<text>, the stderr lines from the first one holding <text> up
to the next empty line are kept too ("stderr_lines", without llama.cpp's log timestamps); STDERR_LINES=<n> keeps at
most n of them. With EXPECT_FAIL=1 the run must fail (llama-completion's "failed to eval": exit 1), and its exit code
is kept ("returncode").
"""

import json
import os
import re
import subprocess
import sys

out, stdin = sys.argv[1], sys.argv[2].encode().decode("unicode_escape")
args = sys.argv[sys.argv.index("--") + 1:]
env = {**os.environ, "LD_PRELOAD": os.environ["EXIT_DELAY"]}
p = subprocess.run([os.path.join(os.environ["LLAMA_BIN"], "llama-completion"), *args], input=stdin.encode(),
                   capture_output=True, env=env)
assert (p.returncode != 0) == bool(os.environ.get("EXPECT_FAIL")), p.stderr.decode(errors="replace")[-2000:]
rec = {"args": args, "stdin": stdin, "stdout": p.stdout.decode("utf-8", "surrogateescape")}
if p.returncode:
    rec["returncode"] = p.returncode
if os.environ.get("STDERR_FROM"):
    lines = [re.sub(r"^\d+\.\d+\.\d+\.\d+ [IWE] ", "", line)
             for line in p.stderr.decode("utf-8", "surrogateescape").split("\n")]
    start = next(i for i, line in enumerate(lines) if os.environ["STDERR_FROM"] in line)
    rec["stderr_lines"] = lines[start:lines.index("", start)][:int(os.environ.get("STDERR_LINES", 1 << 30))]
with open(out, "w") as f:
    json.dump(rec, f, indent=1)
    f.write("\n")
