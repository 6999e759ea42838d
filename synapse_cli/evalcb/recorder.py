"""TraceRecorder: the hook the forward pass calls with each named tensor; it keeps records and can print
them as they come (text or JSON lines) and dump whole tensors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .logformat import format_records, record_to_json
from .record import TensorRecord, ggml_name, record_from_array

# --------------------------------------------------------------------------------------------------
# recorder (the model's trace hook)


class TraceRecorder:
    """Collects the forward pass's tensors; pass it as the model's trace hook.

    `hook(name, op, value, srcs, ggml_type)`: value has numpy shape = reversed ggml ne (float32, or
    float16 for an F16 cache); srcs are (name, ne) of the node's sources. Tensors not matching
    `tensor_filter` are skipped (they are still counted in `n_seen`, the graph position used in
    dump file names). With `dump_dir`, each recorded tensor is also saved as
    `<dump_dir>/<graph position:04d>-<name>.npy` when it arrives.
    """

    def __init__(
        self,
        *,
        tensor_filter: Optional[Callable[[str], bool]] = None,
        keep_values: bool = False,
        dump_dir: Optional[Path] = None,
        on_record: Optional[Callable[[TensorRecord], None]] = None,
    ):
        self.records: list[TensorRecord] = []
        self.tensor_filter = tensor_filter
        self.keep_values = keep_values
        self.dump_dir = Path(dump_dir) if dump_dir is not None else None
        self.on_record = on_record
        self.n_seen = 0
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)

    def __call__(self, name, op, value, srcs, ggml_type, ne=None) -> None:
        """One node: the arguments of `record_from_array`, which makes its record."""
        index = self.n_seen
        self.n_seen += 1
        if self.tensor_filter is not None and not self.tensor_filter(ggml_name(name)):
            return
        rec = record_from_array(name, op, value, srcs, ggml_type, ne=ne, keep_value=self.keep_values)
        if self.dump_dir is not None:
            safe = re.sub(r"[^A-Za-z0-9._-]+", "_", rec.name).strip("_") or "tensor"
            np.save(self.dump_dir / f"{index:04d}-{safe}.npy", np.ascontiguousarray(value))
        self.records.append(rec)
        if self.on_record is not None:
            self.on_record(rec)

    def text(self, *, values: bool = True) -> str:
        return format_records(self.records, values=values)

    def json_lines(self, *, values: bool = True) -> str:
        return "".join(json.dumps(record_to_json(r, values=values)) + "\n" for r in self.records)


