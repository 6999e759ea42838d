"""Fuzzing the GGUF reader with mutated real files: only GGUFError or a sound result, never anything else.

Bases: the vocab-only fixture ggml-vocab-tiny-spm.gguf (1024-token SPM vocabulary, 22 KB), the tiny
Llama Q4_K_M fixture with its real metadata and tensor infos but every tensor shrunk to one row of one
block (so the file stays ~25 KB), and a synthetic file with every value type and nested arrays.
Mutations: bit flips, overwrites with huge/boundary values at the header, length, count, type and offset
fields (found by walking the valid base file) or anywhere, truncations, insertions and deletions.

Each example is parsed from memory (`GGUFReader.from_bytes`, same code as the mmap path), with
tracemalloc watching that nothing sized by a hostile length is allocated. On success every tensor view
and every string/array span must lie inside the file. Hypothesis runs derandomized with no example
database, so CI sees the same cases every time and nothing is written into the repo.
"""

from __future__ import annotations

import itertools
import random
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import TINY_MODELS, VOCABS
from kernels.ggml_type import BLOCK_GEOMETRY, GGMLType
from kernels.errors import GGUFError
from kernels.gguf import GGUFReader, StringArray
from test_gguf_reader import EVERY_ARRAY, EVERY_SCALAR, VT, gguf_bytes, kv, tensor_info

EXAMPLES = 1200  # per base file: 3 bases x 1200 + 100 on disk


def shrunk_tiny_model() -> bytes:
    """tiny-llama-Q4_K_M.gguf with its key/values verbatim and each tensor cut to one block."""
    raw = (TINY_MODELS / "tiny-llama-Q4_K_M.gguf").read_bytes()
    r = GGUFReader.from_bytes(raw)
    kv_bytes = raw[24 : r.tensors[0].info_offset]
    infos, data = [], b""
    for t in r.tensors:
        blck, size = BLOCK_GEOMETRY[GGMLType(t.ggml_type)]
        ne = (blck,) + (1,) * (len(t.ne) - 1)
        infos.append(tensor_info(t.name, ne, t.ggml_type, len(data)))
        data += t.data[:size].tobytes() + b"\0" * (-size % 32)
    head = b"GGUF" + (3).to_bytes(4, "little") + len(infos).to_bytes(8, "little") + r.n_kv.to_bytes(8, "little")
    out = head + kv_bytes + b"".join(infos)
    return out + b"\0" * (-len(out) % 32) + data


def synthetic() -> bytes:
    kvs = [kv(k, t, v) for k, t, v in EVERY_SCALAR]
    kvs += [kv(k, VT.ARRAY, (t, items)) for k, t, items in EVERY_ARRAY]
    kvs.append(kv("n.ints", VT.ARRAY, (VT.ARRAY, [(VT.INT16, [1, -2]), (VT.INT16, []), (VT.INT16, [3])])))
    kvs.append(kv("n.strs", VT.ARRAY, (VT.ARRAY, [(VT.STRING, ["p", "q"])])))
    infos = [tensor_info("a", (32, 2), GGMLType.Q8_0, 0), tensor_info("b", (4,), GGMLType.F32, 96)]
    return gguf_bytes(kvs, infos, bytes(range(112)))


def interesting_positions(blob: bytes) -> list[int]:
    """Offsets of the header, key lengths, value types, array counts, string lengths and tensor-info fields."""
    r = GGUFReader.from_bytes(blob)
    pos = [4, 8, 16]
    for f in list(r.fields.values())[3:]:
        key_len = len(f.name.encode())
        type_at = f.offset + 8 + key_len
        pos += [f.offset, type_at]
        if f.is_array:
            pos += [type_at + 4, type_at + 8]  # element type, count
            if isinstance(f.value, StringArray) and len(f.value):
                pos += [int(f.value.offsets[i]) - 8 for i in (0, 1, len(f.value) - 1) if i < len(f.value)]
        else:
            pos.append(type_at + 4)  # the value (a string's length)
    for t in r.tensors:
        at = t.info_offset + 8 + len(t.name.encode())
        pos += [t.info_offset, at] + [at + 4 + 8 * j for j in range(len(t.ne))]
        pos += [at + 4 + 8 * len(t.ne), at + 8 + 8 * len(t.ne)]  # type, offset
    return sorted(set(pos))


BASES = {
    "vocab-tiny-spm": (VOCABS / "ggml-vocab-tiny-spm.gguf").read_bytes(),
    "tiny-llama-shrunk": shrunk_tiny_model(),
    "synthetic": synthetic(),
}
POSITIONS = {name: interesting_positions(b) for name, b in BASES.items()}

HUGE = [0, 1, 2, 3, 7, 8, 24, 31, 32, 33, 255, 2**16 - 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40,
        2**61, 2**63 - 1, 2**63, 2**64 - 32, 2**64 - 8, 2**64 - 1]


@st.composite
def mutations(draw, name: str) -> bytes:
    """1-3 mutations of a base file. Positions come from a Random seeded by hypothesis (uniform over the
    file, or one of the structural fields): hypothesis' own integers crowd towards 0, i.e. the header."""
    data = bytearray(BASES[name])
    targets = POSITIONS[name]
    rnd = random.Random(draw(st.integers(0, 2**64 - 1)))
    for _ in range(draw(st.integers(1, 3))):
        n = len(data)
        kind = draw(st.sampled_from(["flip", "flip", "huge", "huge", "huge", "byte", "truncate", "insert", "delete"]))
        p = rnd.choice(targets) if rnd.random() < 0.5 and kind != "truncate" else rnd.randrange(n + 1)
        p = min(p, n - 1) if kind in ("flip", "huge", "byte") else min(p, n)
        if kind == "flip":
            data[p] ^= 1 << rnd.randrange(8)
        elif kind == "huge":
            width = draw(st.sampled_from([8, 4, 2, 1]))
            v = draw(st.one_of(st.sampled_from(HUGE), st.just(n), st.just(n - p), st.integers(0, 2**64 - 1)))
            data[p : p + width] = (v % 2 ** (8 * width)).to_bytes(width, "little")
        elif kind == "byte":
            data[p] = rnd.randrange(256)
        elif kind == "truncate":
            del data[p:]
        elif kind == "insert":
            data[p:p] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[p : p + rnd.randint(1, 64)]
        if not data:
            break
    return bytes(data)


def check_sound(r: GGUFReader, size: int) -> None:
    """Everything the reader hands out points inside the file."""
    base = r._buf.ctypes.data
    assert r.file_size == size
    assert 0 <= r.data_offset <= size
    for t in r.tensors:
        assert t.data.dtype == np.uint8 and t.data.nbytes == t.nbytes
        assert r.data_offset <= t.offset and t.offset + t.nbytes <= size
        if t.nbytes:
            assert t.data.ctypes.data - base == t.offset
        blck, tsize = BLOCK_GEOMETRY[GGMLType(t.ggml_type)]
        assert t.nbytes == t.n_elements // blck * tsize
    for f in r.fields.values():
        v = f.value
        if isinstance(v, StringArray) and len(v):
            assert int(v.offsets.min()) >= 0 and int((v.offsets + v.lengths).max()) <= size
        elif isinstance(v, np.ndarray) and v.nbytes:
            start = v.ctypes.data - base
            assert 0 <= start and start + v.nbytes <= size


def parse_mutant(blob: bytes) -> None:
    tracemalloc.start()  # traced only while parsing (tracing hypothesis itself would triple the run time)
    try:
        try:
            r = GGUFReader.from_bytes(blob)
        except GGUFError as e:
            r = None
            msg = str(e)
            assert msg.startswith("offset ") and "\n" not in msg, msg
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # no allocation sized by a hostile length: a string array's (offset, length) index is at most 2x the file
    assert peak <= 4 * len(blob) + (1 << 20)
    if r is not None:
        check_sound(r, len(blob))


FUZZ = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", list(BASES))
def test_bases_are_valid(name):
    r = GGUFReader.from_bytes(BASES[name])
    check_sound(r, len(BASES[name]))
    assert len(POSITIONS[name]) > 20


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BASES))
def test_mutated_files_raise_gguf_error_or_parse_soundly(name):
    @FUZZ
    @given(blob=mutations(name))
    def run(blob):
        parse_mutant(blob)

    run()


_file_ids = itertools.count()


@settings(max_examples=100, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=mutations("tiny-llama-shrunk"))
def test_mutated_files_on_disk(tmp_path, blob):
    """The mmap path (GGUFReader(path)) behaves the same as parsing from memory."""
    path = tmp_path / f"m{next(_file_ids)}.gguf"  # a fresh file: never truncate one a mapping may still use
    path.write_bytes(blob)
    try:
        r = GGUFReader(path)
    except GGUFError as e:
        with pytest.raises(GGUFError) as again:
            GGUFReader.from_bytes(blob)
        assert str(again.value) == str(e)
    else:
        check_sound(r, len(blob))
        m = GGUFReader.from_bytes(blob)
        assert [(t.name, t.offset, t.nbytes) for t in r.tensors] == [(t.name, t.offset, t.nbytes) for t in m.tensors]
