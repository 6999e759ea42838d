"""`synapse bench`'s library: llama-bench's test matrix, timing method, statistics and printers.

Modules: `matrix` (value lists, parameters, instances), `results` (statistics, fields, machine facts),
`runner` (timing, roofline, `run_bench`), `compare` (--compare), `printers`; their names are re-exported here.

Mirrors tools/llama-bench/llama-bench.cpp (llama.cpp commit 0c1e570):
  - `parse_int_range` is llama-bench's `first[-last[(+|*)step]]` list syntax for -p/-n/-d/-b/-ub/-t;
  - `make_instances` keeps llama-bench's loop order (model, batch, ubatch, cache types, threads, depth,
    then every -p, every -n, every -pg), so rows come out in the same order as llama-bench's;
  - `run_test` is llama-bench's main loop body: a warm-up (the whole prompt for pp tests, one token for
    tg tests), then per repetition a cleared KV cache, an untimed prefill of `n_depth` random tokens
    (restored from a snapshot when the previous test used the same depth), and the timed part: the
    prompt of random tokens in batches of n_batch (BOS first when the vocabulary adds one), then
    n_gen single-token decodes of random tokens. Nothing is tokenized or sampled (llama-bench draws
    random ids with std::rand; we draw them with numpy before the clock starts);
  - `avg`/`stdev_*` are llama-bench's `avg`/`stdev` templates (integer arithmetic for nanoseconds,
    double for tokens/s; sample standard deviation), t/s = 1e9 * (n_prompt + n_gen) / ns;
  - `model_desc` is llama_model_desc: `arch + " " + llm_type_name + " " + llama_ftype_name`, with the
    per-arch layer-count tables of src/models/{llama,qwen2,mistral3}.cpp and the file-type names and
    guessing rule of src/llama-model-loader.cpp; size/params are the sums of tensor bytes/elements
    (llama_model_size / llama_model_n_params);
  - the printers (markdown, csv, json, jsonl, sql) write llama-bench's fields, field order, value
    spellings and column widths, so scripts written for llama-bench output read ours.

Beyond llama-bench: a `roofline` figure for tg tests (bytes read per generated token times t/s, as a
share of this machine's read bandwidth measured by `read_bandwidth`) and `--compare`, which runs a real
llama-bench on each test right after synapse's run of it and adds the speed ratio. Synapse-only fields are
appended after llama-bench's in md/csv/json/jsonl; the sql output keeps llama-bench's exact table so it can
be appended to a llama-bench database.

Decisions (documented in benchmarks/RESULTS.md): `backends` is "CPU" (synapse computes what ggml's CPU
backend computes, so rows line up with llama-bench's CPU rows); `build_commit` is synapse's git commit;
`flash_attn` is what -fa asked for (llama_flash_attn_type; default -1, auto, which computes as on, as
llama-bench's does on CPU) and `repack` true (weights are repacked at load); the other GPU/placement fields keep llama-bench's
defaults.
"""

from __future__ import annotations

from .matrix import (  # noqa: F401
    BenchParams, DEFAULT_CACHE_TYPE, DEFAULT_N_BATCH, DEFAULT_N_DEPTH, DEFAULT_N_GEN, DEFAULT_N_PROMPT,
    DEFAULT_N_UBATCH, DEFAULT_REPS, Instance, make_instances, parse_int_range, parse_pg,
)
from .results import (  # noqa: F401
    COMPARE_FIELDS, FIELDS, FIXED_FIELDS, ROOFLINE_FIELDS, Result, STATS_FIELDS, avg_f, avg_ns, build_commit,
    cpu_info, field_type, samples_ts, stdev_f, stdev_ns, test_time_now, to_string,
)
from .runner import (  # noqa: F401
    DepthState, LoadedModel, Progress, TokenSource, add_roofline, describe_model, make_result, read_bandwidth,
    run_bench, run_test, tg_bytes_per_token, weight_bytes_per_token,
)
from .compare import (  # noqa: F401
    CompareError, add_compare, compare_key, llama_bench_args, run_llama_bench,
)
from .printers import (  # noqa: F401
    CsvPrinter, JsonPrinter, JsonlPrinter, MarkdownPrinter, PRINTERS, Printer, SqlPrinter, escape_json,
    format_json_value, format_params, format_size, make_printer, md_width,
)
from ..model_info import file_ftype, ftype_name, model_desc, model_n_params, model_size  # noqa: F401
