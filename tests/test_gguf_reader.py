"""kernels.gguf against gguf-py's GGUFReader (the oracle), synthetic files, and hostile input.

* every tiny fixture model, every vocab file and SmolLM2 are read by both readers and every field
  (offset, types, value) and tensor (type, ne, offsets, bytes) compared; the real models are also
  checked against the gguf-dump JSON fixtures of llama.cpp's build;
* files written with gguf-py's GGUFWriter and by hand (v2, every value type, nested and empty arrays,
  custom alignment, a tensor of every ggml type) round-trip their values;
* each way a file can be malformed raises one GGUFError naming the offset and the field.

The hand builder below (`kv`, `tensor_info`, `gguf_bytes`) writes the GGUF layout directly with struct,
so the offsets the error tests expect are computed independently of the reader.
"""

from __future__ import annotations

import json
import math
import struct
import time
import tracemalloc
from pathlib import Path
from unittest import mock

import gguf
import numpy as np
import pytest

from conftest import FIXTURES, QWEN_05B, REAL_MODELS, SMOLLM2, TINY_MODELS, VOCABS, real_model_path
from kernels.errors import GGUFError
from kernels.gguf import GGUFReader, StringArray
from kernels.ggml_type import BLOCK_GEOMETRY, GGMLType

VT = gguf.GGUFValueType  # the oracle's value-type ids
TINY_FILES = sorted(TINY_MODELS.glob("*.gguf"))
VOCAB_FILES = sorted(VOCABS.glob("*.gguf"))

# --- hand-built GGUF files ---------------------------------------------------------------------

SCALAR_FMT = {VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I", VT.INT32: "<i",
              VT.FLOAT32: "<f", VT.BOOL: "<?", VT.UINT64: "<Q", VT.INT64: "<q", VT.FLOAT64: "<d"}


def gstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(vtype: int, v) -> bytes:
    """A value without its type tag; an array is v = (element type, items)."""
    if vtype == VT.STRING:
        return gstr(v)
    if vtype == VT.ARRAY:
        etype, items = v
        return struct.pack("<IQ", etype, len(items)) + b"".join(value(etype, x) for x in items)
    return struct.pack(SCALAR_FMT[vtype], v)


def kv(key: str | bytes, vtype: int, v) -> bytes:
    return gstr(key) + struct.pack("<I", vtype) + value(vtype, v)


def tensor_info(name: str, ne: tuple[int, ...], ggml_type: int, offset: int) -> bytes:
    return gstr(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}q", *ne) + struct.pack("<IQ", ggml_type, offset)


def gguf_bytes(kvs: list[bytes] = (), infos: list[bytes] = (), data: bytes = b"", *, version: int = 3,
               magic: bytes = b"GGUF", n_kv: int | None = None, n_tensors: int | None = None,
               alignment: int = 32) -> bytes:
    """header | kvs | tensor infos | zero padding to `alignment` (only if there are tensor infos) | data."""
    out = magic + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors,
                              len(kvs) if n_kv is None else n_kv)
    out += b"".join(kvs) + b"".join(infos)
    if infos:
        out += b"\0" * (-len(out) % alignment)
    return out + data


HEADER = 24  # magic + version + n_tensors + n_kv


def write(tmp_path: Path, blob: bytes, name: str = "x.gguf") -> Path:
    p = tmp_path / name
    p.write_bytes(blob)
    return p


# --- the oracle ----------------------------------------------------------------------------------


def gguf_py_reader(path) -> gguf.GGUFReader:
    """gguf-py's reader over an in-memory copy of the file instead of its np.memmap.

    Same parsing code; slicing a memmap runs Python code per slice, which makes gguf-py ~2.5x slower
    on vocabularies (11 s -> 4 s for tekken) and uses twice the memory."""
    with mock.patch.object(gguf.gguf_reader.np, "memmap", lambda p, mode="r": np.fromfile(p, dtype=np.uint8)):
        return gguf.GGUFReader(path)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def assert_matches_gguf_py(ours: GGUFReader, oracle: gguf.GGUFReader) -> None:
    assert list(ours.fields) == list(oracle.fields)
    for name, of in oracle.fields.items():
        f = ours.fields[name]
        assert f.offset == of.offset, name
        assert [t.name for t in f.types] == [t.name for t in of.types], name
        assert len(f) == len(of.data), name
        expected = of.contents()
        assert _same(f.contents(), expected), name
        got = ours.get(name)
        if isinstance(got, StringArray):
            assert got.to_list() == expected, name
            assert got.to_bytes_list() == [s.encode() for s in expected], name
        elif isinstance(got, np.ndarray):
            assert got.tolist() == expected or (f.types[-1] == VT.BOOL and got.astype(bool).tolist() == expected)
        else:
            assert _same(got, expected), name

    assert len(ours.tensors) == len(oracle.tensors)
    assert ours.alignment == oracle.alignment
    if oracle.tensors:
        assert ours.data_offset == oracle.data_offset
    base = ours._buf.ctypes.data
    for t, ot in zip(ours.tensors, oracle.tensors):
        assert t.name == ot.name
        assert t.ggml_type == int(ot.tensor_type) and t.type_name == ot.tensor_type.name
        assert list(t.ne) == ot.shape.tolist()
        assert t.n_elements == ot.n_elements
        assert t.offset == ot.data_offset and t.info_offset == ot.field.offset
        assert t.nbytes == ot.n_bytes
        assert t.data.dtype == np.uint8 and t.data.shape == (t.nbytes,)
        assert t.data.ctypes.data - base == t.offset  # a view of the mapping, not a copy
        assert np.array_equal(t.data, ot.data.reshape(-1).view(np.uint8)), t.name
        assert ours.tensor(t.name) is t


@pytest.mark.parametrize("path", TINY_FILES + VOCAB_FILES, ids=lambda p: p.name)
def test_fixture_matches_gguf_py(path):
    assert_matches_gguf_py(GGUFReader(path), gguf_py_reader(path))


@pytest.mark.real
def test_smollm2_matches_gguf_py():
    path = real_model_path(SMOLLM2)
    assert_matches_gguf_py(GGUFReader(path), gguf_py_reader(path))


@pytest.mark.real
@pytest.mark.parametrize("name", REAL_MODELS)
def test_real_model_matches_gguf_dump_json(name):
    """Fields, offsets, scalar values and tensor infos against `gguf-dump --json` of llama.cpp's build."""
    r = GGUFReader(real_model_path(name))
    dump = json.loads((FIXTURES / "real" / "gguf-dump" / (Path(name).stem + ".json")).read_text())
    assert list(r.fields) == list(dump["metadata"])
    for i, (key, f) in enumerate(r.fields.items()):
        d = dump["metadata"][key]
        assert (d["index"], d["offset"], d["type"]) == (i, f.offset, f.types[0].name), key
        if f.is_array:
            assert d["array_types"] == [t.name for t in f.types[1:]], key
        else:
            assert _same(d["value"], f.value), key
    assert [t.name for t in r.tensors] == list(dump["tensors"])
    for i, t in enumerate(r.tensors):
        d = dump["tensors"][t.name]
        assert (d["index"], d["shape"], d["type"], d["offset"]) == (i, list(t.ne), t.type_name, t.info_offset)
        blck, size = BLOCK_GEOMETRY[GGMLType(t.ggml_type)]
        assert t.nbytes == t.n_elements // blck * size
        assert t.offset % r.alignment == 0 and t.offset + t.nbytes <= r.file_size
    assert r.tensors[-1].offset + r.tensors[-1].nbytes <= r.file_size


@pytest.mark.real
def test_metadata_of_qwen_05b_reads_in_under_300_ms():
    """The issue's budget (gguf-py takes ~9 s); best of 5 so a busy shared machine does not flake it."""
    path = real_model_path(QWEN_05B)
    best = min(_timed(lambda: GGUFReader(path)) for _ in range(5))
    assert best < 0.3, f"{best:.3f} s"


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# --- ggml types ----------------------------------------------------------------------------------

# gguf-py 0.19 (the installed oracle) disagrees with ggml in two places; newer gguf-py agrees with ggml:
#   Q8_1: gguf-py says 4 + 4 + 32 bytes, ggml-common.h static_asserts 2*sizeof(ggml_half) + QK8_1 = 36
#   Q2_0: not known to gguf-py 0.19; ggml.h GGML_TYPE_Q2_0 = 42, block of 64 = ggml_half + 16 bytes
GGML_NOT_GGUF_PY = {GGMLType.Q8_1: (32, 36), GGMLType.Q2_0: (64, 18)}


def test_every_ggml_type_known():
    for qt in gguf.GGMLQuantizationType:
        ours = GGMLType(qt.value)
        assert ours.name == qt.name
        expected = GGML_NOT_GGUF_PY.get(ours, gguf.GGML_QUANT_SIZES[qt])
        assert BLOCK_GEOMETRY[ours] == expected, qt.name
    assert set(GGMLType) == {GGMLType(q.value) for q in gguf.GGMLQuantizationType} | set(GGML_NOT_GGUF_PY)
    assert set(BLOCK_GEOMETRY) == set(GGMLType)


def test_tensor_of_every_type_round_trips(tmp_path):
    """One tensor per ggml type, 2 blocks x 3 rows: ne, type, byte size and data placement."""
    alignment = 64
    infos, chunks, offset = [], [], 0
    expected = []
    for t in GGMLType:
        blck, size = BLOCK_GEOMETRY[t]
        ne = (2 * blck, 3)
        nbytes = 2 * 3 * size
        payload = bytes((t.value + i) % 251 for i in range(nbytes))
        infos.append(tensor_info(f"t.{t.name}", ne, t.value, offset))
        chunks.append(payload + b"\0" * (-nbytes % alignment))
        expected.append((t, ne, offset, payload))
        offset += nbytes + (-nbytes % alignment)
    blob = gguf_bytes([kv("general.alignment", VT.UINT32, alignment)], infos, b"".join(chunks), alignment=alignment)
    r = GGUFReader(write(tmp_path, blob))
    assert r.alignment == alignment and r.data_offset % alignment == 0
    for ti, (t, ne, rel, payload) in zip(r.tensors, expected):
        assert (ti.name, ti.ggml_type, ti.type_name, ti.ne) == (f"t.{t.name}", t.value, t.name, ne)
        assert ti.offset == r.data_offset + rel and ti.nbytes == len(payload)
        assert ti.data.tobytes() == payload
        rows = ti.rows()
        assert rows.shape == (3, len(payload) // 3) and rows.tobytes() == payload


# --- synthetic files: round trips ------------------------------------------------------------------

EVERY_SCALAR = [
    ("v.u8", VT.UINT8, 255), ("v.i8", VT.INT8, -128), ("v.u16", VT.UINT16, 65535), ("v.i16", VT.INT16, -32768),
    ("v.u32", VT.UINT32, 2**32 - 1), ("v.i32", VT.INT32, -(2**31)), ("v.f32", VT.FLOAT32, -1.5),
    ("v.bool_t", VT.BOOL, True), ("v.bool_f", VT.BOOL, False), ("v.u64", VT.UINT64, 2**64 - 1),
    ("v.i64", VT.INT64, -(2**63)), ("v.f64", VT.FLOAT64, 1 / 3), ("v.str", VT.STRING, "héllo ▁wörld 🦙"),
    ("v.empty_str", VT.STRING, ""),
]
EVERY_ARRAY = [
    ("a.u8", VT.UINT8, [0, 1, 255]), ("a.i8", VT.INT8, [-128, 127]), ("a.u16", VT.UINT16, [1, 65535]),
    ("a.i16", VT.INT16, [-5, 5]), ("a.u32", VT.UINT32, [7, 2**32 - 1]), ("a.i32", VT.INT32, [-(2**31), 3]),
    ("a.f32", VT.FLOAT32, [0.5, -2.25, float("inf")]), ("a.bool", VT.BOOL, [True, False, True]),
    ("a.u64", VT.UINT64, [2**64 - 1, 0]), ("a.i64", VT.INT64, [-(2**63), 2**63 - 1]),
    ("a.f64", VT.FLOAT64, [1e300, -1e-300]), ("a.str", VT.STRING, ["a", "", "▁b", "日本"]),
]


def _check_scalars_and_arrays(r: GGUFReader) -> None:
    for key, vtype, v in EVERY_SCALAR:
        f = r.fields[key]
        assert f.types == [vtype] and r.get(key) == v and type(r.get(key)) is type(v), key
    for key, etype, items in EVERY_ARRAY:
        f = r.fields[key]
        assert f.types == [VT.ARRAY, etype] and len(f) == len(items) and f.contents() == items, key
        got = r.get(key)
        if etype == VT.STRING:
            assert isinstance(got, StringArray) and got.to_list() == items
            assert [got.raw(i) for i in range(len(items))] == [s.encode() for s in items]
        else:
            assert isinstance(got, np.ndarray) and got.tolist() == [int(x) if etype == VT.BOOL else x for x in items]


def test_gguf_writer_file_round_trips(tmp_path):
    """Every value type, nested arrays, tensors of several types and alignment 64, written by gguf-py."""
    path = tmp_path / "w.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    for key, vtype, v in EVERY_SCALAR:
        if v == "":
            continue  # GGUFWriter.add_string skips empty strings
        w.add_key_value(key, v, vtype)
    for key, etype, items in EVERY_ARRAY:
        w.add_key_value(key, items, VT.ARRAY, sub_type=etype)
    w.add_key_value("a.nested", [[1, 2, 3], [4], [5, 6]], VT.ARRAY, sub_type=VT.ARRAY)
    w.add_key_value("a.nested_str", [["x", "y"], ["z"]], VT.ARRAY, sub_type=VT.ARRAY)
    rng = np.random.default_rng(0)
    tensors = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal((2, 3, 4)).astype(np.float16),
        "i8": np.arange(-7, 6, dtype=np.int8),
        "i32": np.arange(6, dtype=np.int32).reshape(2, 3),
        "f64": np.array([math.pi], dtype=np.float64),
    }
    for name, a in tensors.items():
        w.add_tensor(name, a)
    q8 = rng.integers(0, 256, size=(4, 2 * 34), dtype=np.uint8)  # 4 rows x 2 Q8_0 blocks
    w.add_tensor("q8", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    r = GGUFReader(path)
    assert r.version == 3 and r.alignment == 64 and r.get("general.alignment") == 64
    assert r.get("general.architecture") == "llama"
    for key, vtype, v in EVERY_SCALAR:
        if v != "":
            assert r.get(key) == v and r.fields[key].types == [vtype], key
    for key, etype, items in EVERY_ARRAY:
        assert r.fields[key].contents() == items, key
    nested = r.fields["a.nested"]
    assert nested.types == [VT.ARRAY, VT.ARRAY, VT.INT32] and nested.contents() == [[1, 2, 3], [4], [5, 6]]
    assert r.fields["a.nested_str"].contents() == [["x", "y"], ["z"]]
    for name, a in tensors.items():
        t = r.tensor(name)
        assert t.ne == tuple(reversed(a.shape)) and t.type_name == {"f32": "F32", "f16": "F16", "i8": "I8",
                                                                     "i32": "I32", "f64": "F64"}[name]
        assert t.offset % 64 == 0 and t.data.tobytes() == a.tobytes()
    t = r.tensor("q8")
    assert (t.type_name, t.ne, t.nbytes) == ("Q8_0", (64, 4), q8.nbytes) and t.data.tobytes() == q8.tobytes()
    assert t.rows().shape == (4, 68)


@pytest.mark.parametrize("version", [2, 3])
def test_hand_built_file_round_trips(tmp_path, version):
    """v2 and v3 (same layout), every value type, nested and empty arrays, alignment 128."""
    kvs = [kv("general.alignment", VT.UINT32, 128)]
    kvs += [kv(key, vtype, v) for key, vtype, v in EVERY_SCALAR]
    kvs += [kv(key, VT.ARRAY, (etype, items)) for key, etype, items in EVERY_ARRAY]
    kvs.append(kv("n.ints", VT.ARRAY, (VT.ARRAY, [(VT.INT16, [1, -2]), (VT.INT16, []), (VT.INT16, [3])])))
    kvs.append(kv("n.deep", VT.ARRAY, (VT.ARRAY, [(VT.ARRAY, [(VT.STRING, ["p", "q"])])])))
    kvs.append(kv("n.empty", VT.ARRAY, (VT.FLOAT32, [])))
    kvs.append(kv("n.f32_nan", VT.FLOAT32, float("nan")))
    data = np.arange(32, dtype=np.float32).tobytes()
    infos = [tensor_info("a", (8, 2), GGMLType.F32, 0), tensor_info("b", (16,), GGMLType.F32, 128)]
    blob = gguf_bytes(kvs, infos, data[:64] + b"\0" * 64 + data, version=version, alignment=128)
    path = write(tmp_path, blob)
    r = GGUFReader(path)
    assert r.version == version and r.fields["GGUF.version"].value == version
    assert r.fields["GGUF.kv_count"].value == len(kvs) and r.fields["GGUF.tensor_count"].value == 2
    _check_scalars_and_arrays(r)
    assert r.fields["n.ints"].contents() == [[1, -2], [], [3]]
    assert r.fields["n.ints"].types == [VT.ARRAY, VT.ARRAY, VT.INT16]
    assert r.fields["n.deep"].contents() == [[["p", "q"]]]
    assert r.fields["n.deep"].types == [VT.ARRAY, VT.ARRAY, VT.ARRAY, VT.STRING]
    assert r.fields["n.empty"].contents() == [] and len(r.fields["n.empty"]) == 0
    assert math.isnan(r.get("n.f32_nan"))
    assert r.alignment == 128 and r.data_offset == len(blob) - len(data) - 128
    assert r.tensor("a").data.tobytes() == data[:64] and r.tensor("a").rows().shape == (2, 32)
    assert r.tensor("b").offset == r.data_offset + 128 and r.tensor("b").data.tobytes() == data[:64]
    # the same bytes from memory give the same reading
    m = GGUFReader.from_bytes(blob)
    assert [(f.name, f.offset, f.types) for f in m.fields.values()] == [
        (f.name, f.offset, f.types) for f in r.fields.values()]
    assert [(t.name, t.offset, t.data.tobytes()) for t in m.tensors] == [
        (t.name, t.offset, t.data.tobytes()) for t in r.tensors]
    # and gguf-py reads the hand-built file the same way (v2 included)
    o = gguf.GGUFReader(path)
    for key in ["v.u64", "v.i64", "v.f64", "v.str", "a.bool", "a.str", "a.f32"]:
        assert o.fields[key].contents() == r.fields[key].contents(), key


def test_default_alignment_and_no_tensors(tmp_path):
    k, info = kv("k", VT.UINT8, 1), tensor_info("t", (4,), GGMLType.F32, 0)
    r = GGUFReader(write(tmp_path, gguf_bytes([k], [info], b"\1" * 16)))
    end_of_infos = HEADER + len(k) + len(info)
    assert r.alignment == 32 and r.data_offset == (end_of_infos + 31) // 32 * 32 > end_of_infos
    assert r.tensors[0].data.tobytes() == b"\1" * 16
    # without tensors the data section starts right after the key/values (gguf.cpp pads only with tensors)
    r = GGUFReader(write(tmp_path, gguf_bytes([kv("k", VT.UINT8, 1)]), "v.gguf"))
    assert r.tensors == [] and r.data_offset == HEADER + len(kv("k", VT.UINT8, 1))


def test_zero_dim_tensor_and_empty_tensor(tmp_path):
    infos = [tensor_info("scalar", (), GGMLType.F32, 0), tensor_info("empty", (0, 3), GGMLType.F32, 32)]
    r = GGUFReader(write(tmp_path, gguf_bytes([], infos, b"\0" * 32 + b"")))
    s, e = r.tensors
    assert (s.ne, s.n_elements, s.nbytes) == ((), 1, 4) and s.rows().shape == (1, 4)
    assert (e.ne, e.n_elements, e.nbytes) == ((0, 3), 0, 0)


def test_nonzero_bool_byte_is_true(tmp_path):
    """gguf.cpp reads a bool as `int8 != 0`; so do we (gguf-py too)."""
    blob = gguf_bytes([gstr("b") + struct.pack("<IB", VT.BOOL, 2)])
    assert GGUFReader(write(tmp_path, blob)).get("b") is True


def test_from_bytes_and_path_agree_on_fixture():
    path = VOCABS / "ggml-vocab-tiny-spm.gguf"
    a, b = GGUFReader(path), GGUFReader.from_bytes(path.read_bytes(), name=str(path))
    assert b.path == str(path)
    assert [(f.name, f.offset, f.types, f.contents()) for f in a.fields.values()] == [
        (f.name, f.offset, f.types, f.contents()) for f in b.fields.values()]


def test_missing_file_is_a_gguf_error(tmp_path):
    with pytest.raises(GGUFError, match="cannot open .*nope.gguf"):
        GGUFReader(tmp_path / "nope.gguf")
    with pytest.raises(GGUFError, match="cannot open"):
        GGUFReader(tmp_path)  # a directory


# --- hostile input: one targeted test per case ------------------------------------------------------

K1 = kv("a.key", VT.UINT32, 7)  # a well-formed first pair


def raises_at(blob: bytes, offset: int, *words: str) -> str:
    """Parse blob from memory; it must raise GGUFError naming `offset` and every word. Returns the message."""
    with pytest.raises(GGUFError) as e:
        GGUFReader.from_bytes(blob)
    msg = str(e.value)
    assert msg.startswith(f"offset {offset}:"), msg
    for w in words:
        assert w in msg, (w, msg)
    assert "\n" not in msg
    return msg


def test_too_short_for_a_header():
    raises_at(b"GGUF\3\0\0\0", 0, "too short")


def test_truncated_in_a_value():
    blob = gguf_bytes([K1, kv("b.u64", VT.UINT64, 5)])
    at = HEADER + len(K1) + len(gstr("b.u64")) + 4
    raises_at(blob[:-3], at, "value of 'b.u64'", "needs 8 bytes", "5 remain")


def test_truncated_in_tensor_infos():
    info = tensor_info("w", (32, 2), GGMLType.F32, 0)
    blob = gguf_bytes([K1], [info], b"\0" * 256)
    cut = HEADER + len(K1) + len(gstr("w")) + 4 + 8  # inside ne[1]
    raises_at(blob[:cut + 3], cut, "ne[1] of tensor 'w'")


def test_bad_magic():
    raises_at(b"GGML" + gguf_bytes([K1])[4:], 0, "bad magic", "b'GGML'")


@pytest.mark.parametrize("version, words", [(4, ["unknown GGUF version 4"]), (1, ["version 1", "not supported"]),
                                            (0x03000000, ["big-endian"]), (0xFFFFFFFF, ["unknown GGUF version"])])
def test_unknown_version(version, words):
    raises_at(gguf_bytes([K1], version=version), 4, *words)


def test_key_length_past_end():
    blob = gguf_bytes([K1, struct.pack("<Q", 1000) + b"abc"])
    raises_at(blob, HEADER + len(K1), "key of pair 1 length 1000", "past the end")


def test_string_value_length_past_end():
    blob = gguf_bytes([gstr("s") + struct.pack("<IQ", VT.STRING, 2**64 - 1) + b"xy"])
    raises_at(blob, HEADER + len(gstr("s")) + 4, "string value of 's' length", "past the end")


def test_string_in_array_past_end():
    body = gstr("arr") + struct.pack("<IIQ", VT.ARRAY, VT.STRING, 2) + gstr("ok") + struct.pack("<Q", 99) + b"z"
    at = HEADER + len(gstr("arr")) + 4 + 12 + len(gstr("ok"))
    raises_at(gguf_bytes([body]), at, "string 1 of array 'arr'", "length 99", "past the end")


def test_array_length_past_end_allocates_nothing():
    body = gstr("arr") + struct.pack("<IIQ", VT.ARRAY, VT.UINT64, 2**61) + b"\0" * 64
    blob = gguf_bytes([body])
    tracemalloc.start()
    try:
        raises_at(blob, HEADER + len(gstr("arr")) + 8, "array 'arr'", "UINT64", "cannot fit")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024  # nothing sized by the hostile count


@pytest.mark.parametrize("etype", [VT.STRING, VT.ARRAY])
def test_array_of_strings_or_arrays_count_past_end(etype):
    body = gstr("arr") + struct.pack("<IIQ", VT.ARRAY, etype, 2**40) + b"\0" * 64
    raises_at(gguf_bytes([body]), HEADER + len(gstr("arr")) + 8, "array 'arr'", "cannot fit")


def test_kv_count_cannot_fit():
    tracemalloc.start()
    try:
        raises_at(gguf_bytes([K1], n_kv=2**64 - 1), 16, "key/value count", "cannot fit")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_tensor_count_cannot_fit():
    raises_at(gguf_bytes([K1], n_tensors=2**40), 8, "tensor count", "cannot fit")


def test_unknown_value_type():
    blob = gguf_bytes([K1, gstr("bad") + struct.pack("<II", 13, 0)])
    raises_at(blob, HEADER + len(K1) + len(gstr("bad")), "value type of 'bad'", "unknown value type 13")


def test_unknown_array_element_type():
    blob = gguf_bytes([gstr("bad") + struct.pack("<IIQ", VT.ARRAY, 77, 0)])
    raises_at(blob, HEADER + len(gstr("bad")) + 4, "array element type of 'bad'", "unknown value type 77")


@pytest.mark.parametrize("type_id", [4, 31, 43, 2**31])  # removed Q4_2, removed Q4_0_4_4, past the end
def test_unknown_tensor_type(type_id):
    info = gstr("w") + struct.pack("<Iq", 1, 32) + struct.pack("<IQ", type_id, 0)
    at = HEADER + len(K1) + len(gstr("w")) + 4 + 8
    raises_at(gguf_bytes([K1], [info], b"\0" * 128), at, "tensor 'w'", f"unknown ggml type {type_id}")


def test_tensor_data_outside_file():
    infos = [tensor_info("a", (8,), GGMLType.F32, 0), tensor_info("b", (8,), GGMLType.F32, 32)]
    blob = gguf_bytes([K1], infos, b"\0" * 40)  # b needs [32, 64) of the data section
    at = HEADER + len(K1) + len(infos[0])
    raises_at(blob, at, "tensor 'b' data", "outside the file")


def test_tensor_offset_huge():
    blob = gguf_bytes([K1], [tensor_info("a", (8,), GGMLType.F32, 2**64 - 32)], b"\0" * 64)
    raises_at(blob, HEADER + len(K1), "tensor 'a' data", "outside the file")


def test_tensor_misaligned():
    blob = gguf_bytes([K1], [tensor_info("a", (4,), GGMLType.F32, 16)], b"\0" * 64)
    raises_at(blob, HEADER + len(K1), "tensor 'a' data offset 16", "not aligned to 32")


def test_duplicate_key():
    raises_at(gguf_bytes([K1, K1]), HEADER + len(K1), "duplicate key 'a.key'")


def test_duplicate_tensor_name():
    infos = [tensor_info("w", (8,), GGMLType.F32, 0), tensor_info("w", (8,), GGMLType.F32, 32)]
    raises_at(gguf_bytes([K1], infos, b"\0" * 64), HEADER + len(K1) + len(infos[0]), "duplicate tensor name 'w'")


def test_ne_product_overflows():
    blob = gguf_bytes([K1], [tensor_info("w", (2**32, 2**32), GGMLType.F32, 0)], b"\0" * 64)
    raises_at(blob, HEADER + len(K1), "tensor 'w'", "overflows")


def test_negative_ne():
    blob = gguf_bytes([K1], [tensor_info("w", (8, -1), GGMLType.F32, 0)], b"\0" * 64)
    raises_at(blob, HEADER + len(K1), "tensor 'w' ne[1] = -1", "negative")


def test_too_many_dims():
    blob = gguf_bytes([K1], [tensor_info("w", (1, 1, 1, 1, 1), GGMLType.F32, 0)], b"\0" * 64)
    raises_at(blob, HEADER + len(K1) + len(gstr("w")), "tensor 'w' has 5 dimensions")


def test_row_not_whole_blocks():
    blob = gguf_bytes([K1], [tensor_info("w", (48, 2), GGMLType.Q4_0, 0)], b"\0" * 256)
    raises_at(blob, HEADER + len(K1), "tensor 'w'", "48", "block size 32")


def test_tensor_name_too_long():
    blob = gguf_bytes([K1], [tensor_info("n" * 64, (8,), GGMLType.F32, 0)], b"\0" * 64)
    raises_at(blob, HEADER + len(K1), "tensor name", ">= 64")


@pytest.mark.parametrize("alignment, words", [(0, "not a power of 2"), (48, "not a power of 2")])
def test_bad_alignment(alignment, words):
    raises_at(gguf_bytes([K1, kv("general.alignment", VT.UINT32, alignment)]), HEADER + len(K1),
              "general.alignment", words)


def test_alignment_of_wrong_type():
    raises_at(gguf_bytes([kv("general.alignment", VT.UINT64, 32)]), HEADER, "general.alignment must be UINT32")


def test_arrays_nested_too_deep():
    inner = (VT.UINT8, [1])
    for _ in range(9):
        inner = (VT.ARRAY, [inner])
    blob = gguf_bytes([kv("deep", VT.ARRAY, inner)])
    with pytest.raises(GGUFError, match=r"^offset \d+: arrays nested deeper than 8 in 'deep(\[0\])+'"):
        GGUFReader.from_bytes(blob)


def test_key_not_utf8():
    raises_at(gguf_bytes([kv(b"\xff\xfe", VT.UINT8, 1)]), HEADER + 8, "key of pair 0", "not valid UTF-8")


def test_release_keeps_tensor_views_valid():
    """GGUFReader.release drops a tensor's resident pages (the loader calls it for repacked weights); the
    zero-copy view must still read the file's bytes afterwards, and an in-memory reader ignores it."""
    path = TINY_MODELS / "tiny-llama-Q4_K_M.gguf"
    r = GGUFReader(path)
    before = {t.name: t.data.copy() for t in r.tensors}
    for t in r.tensors:
        r.release(t)
    for t in r.tensors:
        assert np.array_equal(t.data, before[t.name]), t.name
    m = GGUFReader.from_bytes(path.read_bytes())
    m.release(m.tensors[0])
    assert np.array_equal(m.tensors[0].data, before[m.tensors[0].name])
