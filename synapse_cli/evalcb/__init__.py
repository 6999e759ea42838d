"""Traces of a forward pass in llama-eval-callback's text format: record type, recorder, printer, parser, differ.

Modules: `record` (TensorRecord, the tensor filter), `logformat` (printer, parser, JSON), `recorder` (the
forward pass's trace hook), `diff` (differ and its rendering), `live` (a traced run); names re-exported here.

Mirrors llama.cpp's `common_debug_cb_eval` / `common_debug_print_tensor` (common/debug.cpp), which
`llama-eval-callback` (examples/eval-callback) installs as the scheduler's eval callback:

  * header: `common_debug_cb_eval: %24s = (%s) %10s(%s{%s}, %s}) = {%s}` with the node name, its
    ggml type, `ggml_op_desc` (the op, or the unary/GLU sub-op), src0 `name{ne}`, src1 `name{ne}`
    (formatted into a 128-byte buffer, so at most 127 characters) and the node's ne, innermost first;
  * for non-quantized types the values, per i3: `[`, then per i2 `[`, per i1 a row of `%12.4f`
    values; along i2, i1 and i0 only the first n=3 and last n=3 indices are printed when the extent
    is > 2n, with a `..., ` marker in between; after each i3 block `sum = %f`, the sum of **all**
    elements accumulated in one float32 variable in index order (i3, i2, i1, i0; i0 fastest).

Formats read by the parser (`parse_log_text`, `load_trace`):
  * the current `common_debug_cb_eval:` prefix with 4/8/12-space indentation (the fixtures);
  * the older `ggml_debug:` prefix of examples/eval-callback/eval-callback.cpp, with `%16s` or
    `%24s` names and either 4/5/6- or 37/38/39-space indentation, `..., ` without padding. The
    2024 versions summed only the *printed* elements (and kept summing across i3 blocks); such
    files are recognised by their sums (see `_detect_sum_kind`) and marked `sum_kind="printed"`;
  * synapse's own output: the same text, `--no-values` text (header + `sum = `), and `--json`
    (one JSON object per tensor per line, see `record_to_json`).

A trace record keeps the header fields, the float32 sum and the *shown* block: the printed
corner values as an array (ne3, k2, k1, k0), k = 6 when ne > 6 else ne. A record made from a full
array (the model's trace hook) derives the same block, so one printer serves both; the tensor can
also be kept whole (`value`) for `--dump-dir`.

The differ aligns two traces by name. A name can occur several times (`Qcur-0` is the MUL_MAT,
then the RESHAPE, then the ROPE; `norm-0` is the attention and then the FFN norm); by default the
**last** occurrence, the tensor's final value, is compared (`occurrence="all"` pairs the k-th
occurrences instead). Sums are compared relatively:

    rel = |sum_a - sum_b| / max(|sum_a|, |sum_b|, sqrt(N) * rms, PRINT_RES / tolerance)

The floor `sqrt(N) * rms` (exact when a side has the full array, else estimated from the printed
corners, which overestimates it for sparse tensors such as KV-cache views) is the typical size of a sum of N terms of that magnitude when they cancel:
for a tensor whose sum is near zero by cancellation (embeddings, rotated heads) the relative
difference of the sum says nothing, while independent element errors of relative size e move
the sum by about e * sqrt(N) * rms, so against this floor `rel` reads as a per-element relative
error. `PRINT_RES / tolerance` (1e-2 at the default 1e-4) makes a difference of one unit of
`%f`'s last digit (1e-6, the resolution of a logged sum) never count as a divergence, e.g. for
all-zero cache tensors. Printed values are compared too where both sides have them: they must
agree within one unit of `%12.4f`'s last digit (1e-4) plus tolerance * max|value|, which catches
layout errors (a wrong permute keeps the sum).
"""

from __future__ import annotations

from .record import (  # noqa: F401
    EvalCbError, GGML_MAX_NAME, HEADER_PREFIX, INDENT, N_SHOW, PRINT_RES, SRC1_BUF, TensorRecord, VALUE_RES,
    VALUE_TYPES, compile_tensor_filter, ggml_name, ggml_sum, pad_ne, record_from_array, shown_block,
    shown_indices,
)
from .logformat import (  # noqa: F401
    build_cpu_features, c_float, format_header, format_record, format_records, format_values, json_num, load_trace,
    ne_str, parse_log_text, printed_sum, record_from_json, record_to_json,
)
from .recorder import (  # noqa: F401
    TraceRecorder,
)
from .diff import (  # noqa: F401
    TensorDiff, TraceDiff, build_notes, cache_size_notes, compare_records, diff_traces, host_has_avx512, rel_diff,
    render_diff,
)
from .live import (  # noqa: F401
    run_live,
)
