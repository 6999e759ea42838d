"""GGUF reader: the bottom layer of synapse's model loader (mirrors ggml/src/gguf.cpp's checks).

A GGUF file is
    magic "GGUF" | u32 version (2 or 3) | u64 n_tensors | u64 n_kv
    n_kv x (string key, u32 value type, value)
    n_tensors x (string name, u32 n_dims, n_dims x i64 ne, u32 ggml type, u64 offset)
    padding to `general.alignment` (default 32) | tensor data
where a string is u64 length + bytes and an array is u32 element type + u64 count + elements.

The file is memory-mapped once; tensors are zero-copy numpy views of their bytes. Every length and
count read from the file is checked against the bytes left before anything is allocated, so a
truncated, corrupt or hostile file raises one `GGUFError` naming the offset and the field, and never
allocates more than a small multiple of the file's size (a string array's (start, length) index is
16 bytes per string of at least 8 file bytes) or loops longer than its length.

String arrays (a vocabulary is 150k strings) are scanned once for their offsets and decoded only
when asked for, in bulk.

`GGUFReader(path)` maps a file; `GGUFReader.from_bytes(data)` parses an image already in memory
(same checks; used by the fuzz tests).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Iterator

import numpy as np

from kernels.ggml_type import BLOCK_GEOMETRY, GGMLType

from .errors import GGUFError

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64
MAX_ARRAY_NESTING = 8  # gguf.cpp reads no nested arrays at all; gguf-py reads any depth
INT64_MAX = (1 << 63) - 1


class GGUFValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# fixed-size value types -> little-endian numpy dtype
SCALAR_DTYPES: dict[GGUFValueType, np.dtype] = {
    GGUFValueType.UINT8: np.dtype("<u1"),
    GGUFValueType.INT8: np.dtype("<i1"),
    GGUFValueType.UINT16: np.dtype("<u2"),
    GGUFValueType.INT16: np.dtype("<i2"),
    GGUFValueType.UINT32: np.dtype("<u4"),
    GGUFValueType.INT32: np.dtype("<i4"),
    GGUFValueType.FLOAT32: np.dtype("<f4"),
    GGUFValueType.BOOL: np.dtype("u1"),
    GGUFValueType.UINT64: np.dtype("<u8"),
    GGUFValueType.INT64: np.dtype("<i8"),
    GGUFValueType.FLOAT64: np.dtype("<f8"),
}


@dataclass
class StringArray:
    """A GGUF array of strings, kept as (offset, length) pairs into the mapped file."""

    buf: np.ndarray  # (file_size,) uint8, the whole mapped file
    offsets: np.ndarray  # (n,) int64, start of each string's bytes
    lengths: np.ndarray  # (n,) int64

    def __len__(self) -> int:
        return len(self.offsets)

    def raw(self, i: int) -> bytes:
        o = int(self.offsets[i])
        return self.buf[o : o + int(self.lengths[i])].tobytes()

    def to_bytes_list(self) -> list[bytes]:
        """All strings as bytes, decoded in one pass over one contiguous copy."""
        if len(self) == 0:
            return []
        lo = int(self.offsets[0]) - 8
        hi = int(self.offsets[-1] + self.lengths[-1])
        blob = self.buf[lo:hi].tobytes()
        starts = (self.offsets - lo).tolist()
        ends = (self.offsets - lo + self.lengths).tolist()
        return [blob[s:e] for s, e in zip(starts, ends)]

    def to_list(self) -> list[str]:
        return [b.decode("utf-8", errors="replace") for b in self.to_bytes_list()]


@dataclass
class Field:
    """One metadata key/value pair (or one of the three header pseudo-fields gguf-dump shows)."""

    name: str
    offset: int  # file offset of the key (of the value for header pseudo-fields)
    types: list[GGUFValueType]  # [ARRAY, ..., leaf] for arrays, [type] for scalars
    value: Any  # python scalar, str, np.ndarray, StringArray, or list (nested arrays)

    @property
    def is_array(self) -> bool:
        return self.types[0] == GGUFValueType.ARRAY

    def __len__(self) -> int:
        """Element count as gguf-dump shows it: 1 for scalars and strings, n for arrays."""
        return len(self.value) if self.is_array else 1

    def contents(self, limit: int | None = None) -> Any:
        """Python value(s) as gguf-py's `ReaderField.contents()` gives them."""
        v = self.value
        if not self.is_array:
            return v
        if isinstance(v, StringArray):
            if limit is None or limit >= len(v):
                return v.to_list()  # bulk decode: 10x faster than raw(i) per string on a vocabulary
            return [v.raw(i).decode("utf-8", errors="replace") for i in range(limit)]
        if isinstance(v, np.ndarray):
            v = v if limit is None else v[:limit]
            if self.types[-1] == GGUFValueType.BOOL:
                return [bool(x) for x in v]
            return v.tolist()
        items = v if limit is None else v[:limit]
        return [x.contents() if isinstance(x, Field) else x for x in items]


@dataclass
class TensorInfo:
    name: str
    ggml_type: int  # GGMLType value
    ne: tuple[int, ...]  # (ne0, ne1, ...) innermost first, as stored (n_dims entries)
    offset: int  # absolute file offset of the data
    nbytes: int
    info_offset: int  # file offset of the tensor-info record (gguf-dump's "offset")
    data: np.ndarray = field(repr=False)  # (nbytes,) uint8, zero-copy view into the mapping

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.ne:
            n *= d
        return n

    @property
    def type_name(self) -> str:
        return GGMLType(self.ggml_type).name

    def rows(self) -> np.ndarray:
        """(n_rows, row_bytes) uint8 view: one row of ne0 elements per line."""
        ne0 = self.ne[0] if self.ne else 1  # a 0-d tensor is one element
        n_rows = self.n_elements // ne0 if ne0 else 0
        return self.data.reshape(n_rows, -1) if n_rows else self.data.reshape(0, 0)


class _Cursor:
    """Bounds-checked little-endian reads from the mapping."""

    def __init__(self, buf: np.ndarray, mm: mmap.mmap | bytes):
        self.buf = buf
        self.mm = mm
        self.size = len(buf)
        self.pos = 0

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise GGUFError(
                f"offset {self.pos}: {what} needs {n} bytes but only {self.size - self.pos} remain (file truncated?)"
            )

    def unpack(self, fmt: str, what: str):
        n = struct.calcsize(fmt)
        self.need(n, what)
        v = struct.unpack_from(fmt, self.mm, self.pos)
        self.pos += n
        return v[0] if len(v) == 1 else v

    def u32(self, what: str) -> int:
        return self.unpack("<I", what)

    def u64(self, what: str) -> int:
        return self.unpack("<Q", what)

    def string_span(self, what: str) -> tuple[int, int]:
        start = self.pos
        n = self.u64(f"{what} length")
        if n > self.size - self.pos:
            raise GGUFError(f"offset {start}: {what} length {n} runs past the end of the file")
        s = self.pos
        self.pos += n
        return s, n

    def string(self, what: str) -> str:
        s, n = self.string_span(what)
        raw = self.mm[s : s + n]
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError(f"offset {s}: {what} is not valid UTF-8 ({e.reason})") from None


def _check_header_size(size: int) -> None:
    if size < 24:
        raise GGUFError(f"offset 0: file is {size} bytes, too short for a GGUF header (24 bytes)")


class GGUFReader:
    """A memory-mapped GGUF file: `fields` (ordered dict), `tensors` (list), zero-copy data."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                _check_header_size(size)
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise GGUFError(f"cannot open {self.path}: {e.strerror or e}") from None
        self._load(mm, size)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, name: str = "<bytes>") -> "GGUFReader":
        """Parse a GGUF image already in memory (tests and fuzzing need no temporary file).

        Same checks and API as `GGUFReader(path)`; `path` is `name`, tensor views point into a
        read-only copy of `data`."""
        self = cls.__new__(cls)
        self.path = name
        buf = bytes(data)
        _check_header_size(len(buf))
        self._load(buf, len(buf))
        return self

    def _load(self, mm: mmap.mmap | bytes, size: int) -> None:
        self._mm = mm
        self._buf = np.frombuffer(mm, dtype=np.uint8)  # (file_size,) uint8
        self.file_size = size
        self.fields: dict[str, Field] = {}
        self.tensors: list[TensorInfo] = []
        self._parse()
        self._by_name = {t.name: t for t in self.tensors}

    # --- public API -------------------------------------------------------------------------

    def set_overrides(self, overrides: dict[str, tuple[str, Any]], warn=None) -> None:
        """llama.cpp's --override-kv: key -> (tag, value), tag int | float | bool | str. get() then returns the
        value instead of the file's, unless the file holds that key as another kind of value: as llama.cpp's
        validate_override, that is a warning (through `warn`, once per key) and the file's value stays."""
        self._overrides = dict(overrides)
        self._override_warn = warn
        self._override_warned: set[str] = set()

    @staticmethod
    def _override_tag(f: Field) -> str | None:
        t = f.types[0]
        if f.is_array:
            return None
        if t == GGUFValueType.BOOL:
            return "bool"
        if t in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
            return "float"
        if t == GGUFValueType.STRING:
            return "str"
        return "int"

    def get(self, key: str, default: Any = None) -> Any:
        """The value of metadata `key`: a scalar, str, list of scalars, or StringArray (or its override)."""
        f = self.fields.get(key)
        ovr = getattr(self, "_overrides", {}).get(key)
        if ovr is not None:
            tag, value = ovr
            expected = self._override_tag(f) if f is not None else tag
            if expected == tag:
                return value
            if key not in self._override_warned and self._override_warn is not None:
                self._override_warned.add(key)
                self._override_warn(f"validate_override: Warning: Bad metadata override type for key '{key}', "
                                    f"expected {expected} but got {tag}")
        if f is None:
            return default
        if f.is_array and isinstance(f.value, np.ndarray):
            return f.value
        return f.value

    def tensor(self, name: str) -> TensorInfo | None:
        return self._by_name.get(name)

    def read_into(self, t: TensorInfo, out: np.ndarray) -> None:
        """Copy `t`'s bytes into `out` (C-contiguous, t.nbytes bytes) by reading the file (os.preadv: no page
        faults on the mapping); from memory for in-memory readers."""
        dst = out.reshape(-1).view(np.uint8)
        if dst.size != t.nbytes:
            raise ValueError(f"read_into: {t.name} has {t.nbytes} bytes, the destination {dst.size}")
        if not isinstance(self._mm, mmap.mmap) or not hasattr(os, "preadv"):
            dst[:] = t.data
            return
        with open(self.path, "rb", buffering=0) as f:
            done = 0
            while done < t.nbytes:
                n = os.preadv(f.fileno(), [memoryview(dst[done:])], t.offset + done)
                if n <= 0:
                    raise GGUFError(f"{self.path}: file ended inside tensor {t.name!r}")
                done += n

    def release(self, t: TensorInfo) -> None:
        """Drop the mapping's resident pages of `t`'s data (madvise MADV_DONTNEED on the whole pages inside
        it): for a tensor whose bytes were copied into another layout, so the copy and the mapped original do
        not both count in the process's resident size. The view stays valid: a later read faults the pages
        back in from the page cache. No-op for in-memory readers and where madvise is missing."""
        if not isinstance(self._mm, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        start = -(-t.offset // page) * page
        end = (t.offset + t.nbytes) // page * page
        if end > start:
            try:
                self._mm.madvise(mmap.MADV_DONTNEED, start, end - start)
            except OSError:
                pass  # advice only: the pages just stay resident

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self.tensors)

    @property
    def architecture(self) -> str | None:
        return self.get("general.architecture")

    # --- parsing ----------------------------------------------------------------------------

    def _parse(self) -> None:
        c = _Cursor(self._buf, self._mm)
        magic = bytes(self._mm[0:4])
        if magic != GGUF_MAGIC:
            raise GGUFError(f"offset 0: bad magic {magic!r}, expected b'GGUF' (not a GGUF file)")
        c.pos = 4
        version = c.u32("version")
        if version == 1:
            raise GGUFError("offset 4: GGUF version 1 is not supported (v2 and v3 are)")
        if version not in (2, 3):
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if swapped in (2, 3):
                raise GGUFError(f"offset 4: version {version:#x} means a big-endian file; only little-endian is read")
            raise GGUFError(f"offset 4: unknown GGUF version {version}")
        self.version = version
        n_tensors = c.u64("tensor count")
        n_kv = c.u64("key/value count")
        # each kv needs >= 8 (key len) + 4 (type) + 1 bytes; each tensor info >= 8 + 4 + 4 + 8
        if n_kv > (self.file_size - c.pos) // 13:
            raise GGUFError(f"offset 16: key/value count {n_kv} cannot fit in a file of {self.file_size} bytes")
        if n_tensors > (self.file_size - c.pos) // 24:
            raise GGUFError(f"offset 8: tensor count {n_tensors} cannot fit in a file of {self.file_size} bytes")
        self.n_tensors, self.n_kv = n_tensors, n_kv
        self.fields["GGUF.version"] = Field("GGUF.version", 4, [GGUFValueType.UINT32], version)
        self.fields["GGUF.tensor_count"] = Field("GGUF.tensor_count", 8, [GGUFValueType.UINT64], n_tensors)
        self.fields["GGUF.kv_count"] = Field("GGUF.kv_count", 16, [GGUFValueType.UINT64], n_kv)

        for i in range(n_kv):
            key_offset = c.pos
            key = c.string(f"key of pair {i}")
            if key in self.fields:
                raise GGUFError(f"offset {key_offset}: duplicate key {key!r} (pair {i})")
            vtype = self._value_type(c, f"value type of {key!r}")
            types, value = self._read_value(c, vtype, key, depth=0)
            self.fields[key] = Field(key, key_offset, types, value)

        alignment = GGUF_DEFAULT_ALIGNMENT
        af = self.fields.get("general.alignment")
        if af is not None:
            if af.types != [GGUFValueType.UINT32]:
                raise GGUFError(f"offset {af.offset}: general.alignment must be UINT32, is {af.types[-1].name}")
            alignment = af.value
            if alignment == 0 or alignment & (alignment - 1):
                raise GGUFError(f"offset {af.offset}: general.alignment {alignment} is not a power of 2")
        self.alignment = alignment

        infos = []
        seen: set[str] = set()
        for i in range(n_tensors):
            info_offset = c.pos
            name = c.string(f"name of tensor {i}")
            if len(name.encode()) >= GGML_MAX_NAME:
                raise GGUFError(f"offset {info_offset}: tensor name {name[:80]!r} is {len(name)} >= {GGML_MAX_NAME} bytes")
            if name in seen:
                raise GGUFError(f"offset {info_offset}: duplicate tensor name {name!r}")
            seen.add(name)
            n_dims = c.u32(f"n_dims of tensor {name!r}")
            if n_dims > GGML_MAX_DIMS:
                raise GGUFError(f"offset {c.pos - 4}: tensor {name!r} has {n_dims} dimensions, max {GGML_MAX_DIMS}")
            ne = tuple(c.unpack("<q", f"ne[{j}] of tensor {name!r}") for j in range(n_dims))
            n_el = 1
            for j, d in enumerate(ne):
                if d < 0:
                    raise GGUFError(f"offset {info_offset}: tensor {name!r} ne[{j}] = {d} is negative")
                n_el *= d
            if n_el > INT64_MAX:
                raise GGUFError(f"offset {info_offset}: tensor {name!r} shape {ne} overflows int64 elements")
            type_offset = c.pos
            t = c.u32(f"type of tensor {name!r}")
            try:
                gtype = GGMLType(t)
            except ValueError:
                raise GGUFError(f"offset {type_offset}: tensor {name!r} has unknown ggml type {t}") from None
            blck, tsize = BLOCK_GEOMETRY[gtype]
            ne0 = ne[0] if ne else 1
            if ne0 % blck:
                raise GGUFError(
                    f"offset {info_offset}: tensor {name!r} row of {ne0} elements is not a multiple of "
                    f"{gtype.name}'s block size {blck}"
                )
            nbytes = n_el // blck * tsize
            rel = c.u64(f"data offset of tensor {name!r}")
            infos.append((name, gtype, ne, rel, nbytes, info_offset))

        data_start = c.pos
        if n_tensors:
            data_start = (c.pos + alignment - 1) // alignment * alignment
        self.data_offset = data_start
        for name, gtype, ne, rel, nbytes, info_offset in infos:
            if rel % alignment:
                raise GGUFError(f"offset {info_offset}: tensor {name!r} data offset {rel} is not aligned to {alignment}")
            start = data_start + rel
            if start > self.file_size or nbytes > self.file_size - start:
                raise GGUFError(
                    f"offset {info_offset}: tensor {name!r} data [{start}, {start + nbytes}) lies outside "
                    f"the file ({self.file_size} bytes)"
                )
            view = self._buf[start : start + nbytes]
            self.tensors.append(TensorInfo(name, int(gtype), ne, start, nbytes, info_offset, view))

    @staticmethod
    def _value_type(c: _Cursor, what: str) -> GGUFValueType:
        at = c.pos
        t = c.u32(what)
        try:
            return GGUFValueType(t)
        except ValueError:
            raise GGUFError(f"offset {at}: {what} is unknown value type {t}") from None

    def _read_value(self, c: _Cursor, vtype: GGUFValueType, key: str, depth: int):
        if vtype == GGUFValueType.STRING:
            return [vtype], c.string(f"string value of {key!r}")
        if vtype != GGUFValueType.ARRAY:
            dt = SCALAR_DTYPES[vtype]
            c.need(dt.itemsize, f"value of {key!r}")
            v = self._buf[c.pos : c.pos + dt.itemsize].view(dt)[0]
            c.pos += dt.itemsize
            if vtype == GGUFValueType.BOOL:
                return [vtype], bool(v)  # any nonzero byte is true, as in gguf.cpp (`tmp != 0`)
            return [vtype], v.item()
        # array
        if depth >= MAX_ARRAY_NESTING:
            raise GGUFError(f"offset {c.pos}: arrays nested deeper than {MAX_ARRAY_NESTING} in {key!r}")
        etype = self._value_type(c, f"array element type of {key!r}")
        count_at = c.pos
        n = c.u64(f"array length of {key!r}")
        left = self.file_size - c.pos
        if etype == GGUFValueType.STRING:
            if n > left // 8:
                raise GGUFError(f"offset {count_at}: array {key!r} of {n} strings cannot fit in the {left} bytes left")
            c.pos, offsets, lengths = self._scan_strings(c.pos, n, key)
            return [vtype, etype], StringArray(self._buf, offsets, lengths)
        if etype == GGUFValueType.ARRAY:
            if n > left // 12:
                raise GGUFError(f"offset {count_at}: array {key!r} of {n} arrays cannot fit in the {left} bytes left")
            # types = [ARRAY] + the first inner array's types (what gguf-py reports); an empty
            # array of arrays has no inner type to report, so it is [ARRAY, ARRAY, UINT8]
            items, inner_types = [], [GGUFValueType.ARRAY, GGUFValueType.UINT8]
            for i in range(n):
                item_offset = c.pos
                it, iv = self._read_value(c, GGUFValueType.ARRAY, f"{key}[{i}]", depth + 1)
                if i == 0:
                    inner_types = it
                items.append(Field(f"{key}[{i}]", item_offset, it, iv))
            return [vtype] + inner_types, items
        dt = SCALAR_DTYPES[etype]
        if n > left // dt.itemsize:
            raise GGUFError(f"offset {count_at}: array {key!r} of {n} {etype.name} cannot fit in the {left} bytes left")
        arr = self._buf[c.pos : c.pos + n * dt.itemsize].view(dt)
        c.pos += n * dt.itemsize
        return [vtype, etype], arr

    def _scan_strings(self, pos: int, n: int, key: str) -> tuple[int, np.ndarray, np.ndarray]:
        """Walk n strings starting at pos: (end position, (n,) int64 starts, (n,) int64 lengths).

        The hot loop of the reader (two 150k-string arrays in a Qwen vocabulary): it records only each
        string's end, a chunk at a time in a list (cheaper than numpy item stores); starts and lengths
        are then derived with whole-array operations. Temporary memory: one list of at most 4096 ints."""
        ends = np.empty(n, dtype=np.int64)
        mm, size = self._mm, self.file_size
        unpack = struct.Struct("<Q").unpack_from
        first, last_len_at = pos, size - 8
        for lo in range(0, n, 4096):
            hi = min(n, lo + 4096)
            chunk: list[int] = []
            add = chunk.append
            for i in range(lo, hi):
                if pos > last_len_at:
                    raise GGUFError(f"offset {pos}: string {i} of array {key!r} truncated")
                end = pos + 8 + unpack(mm, pos)[0]
                if end > size:
                    raise GGUFError(
                        f"offset {pos}: string {i} of array {key!r} has length {end - pos - 8} past the end of the file"
                    )
                add(end)
                pos = end
            ends[lo:hi] = chunk
        starts = np.empty(n, dtype=np.int64)
        if n:
            starts[0] = first + 8
            starts[1:] = ends[:-1]
            starts[1:] += 8  # each string's bytes follow its u64 length
        ends -= starts  # now the lengths
        return pos, starts, ends

    def close(self) -> None:
        """Drop our references; the mapping closes once no tensor view is alive."""
        self._buf = None  # type: ignore[assignment]
        self.tensors = []
        self._by_name = {}

    def __enter__(self) -> "GGUFReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
