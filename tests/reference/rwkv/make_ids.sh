#!/bin/sh
# ids.jsonl: llama-tokenize's ids for every public text, with and without --no-parse-special;
# pieces__<case>.txt: its default output (id -> 'piece') for three texts.  Usage: sh make_ids.sh $B $FIXTURES
B=$1; F=$2; T=$(mktemp -d)
python3 - "$F/tokenizer/texts.json" "$T" <<'PY'
import json, sys
for d in json.load(open(sys.argv[1], encoding="utf-8")):
    open(f"{sys.argv[2]}/{d['case_id']}.txt", "wb").write(d["text"].encode())
PY
: > ids.jsonl
for f in $(python3 -c "import json,sys; print(' '.join(d['case_id'] for d in json.load(open(sys.argv[1]))))" "$F/tokenizer/texts.json"); do
    for flag in "" "--no-parse-special"; do
        ids=$($B/llama-tokenize -m ggml-vocab-tiny-rwkv.gguf -f "$T/$f.txt" --ids --log-disable --no-escape $flag)
        ps=$([ -z "$flag" ] && echo true || echo false)
        echo "{\"case_id\": \"$f\", \"parse_special\": $ps, \"ids\": $ids}" >> ids.jsonl
    done
done
for f in multi_script emoji python_code spm_specials; do
    $B/llama-tokenize -m ggml-vocab-tiny-rwkv.gguf -f "$T/$f.txt" --log-disable --no-escape > "pieces__$f.txt"
done
rm -r "$T"
