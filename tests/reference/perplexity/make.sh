#!/bin/sh
# The llama-perplexity runs whose outputs are in this folder (README.md). Run from this folder as
#   B=<llama.cpp 0c1e570>/build/bin EXIT_DELAY=<exit_delay.so> OUT=<a folder outside the tree> sh make.sh
# (the references here were made with OUT=/root/ref/ppl/out and copied in).
: "${B:?set B to llama.cpp's build/bin}" "${EXIT_DELAY:?set EXIT_DELAY to exit_delay.so}" "${OUT:=.}"
FX=../../../../shared/fixtures
F=$FX/perplexity-corpus.txt
R=../../../models                  # real models (make models)
T=../models                        # tests/reference/models
TF=$FX/tiny/models
run() {  # run NAME MODEL ARGS...
    name=$1; model=$2; shift 2
    LD_PRELOAD=$EXIT_DELAY $B/llama-perplexity -m $model -f $F -t 2 "$@" > $OUT/$name.out 2> $OUT/$name.err
    echo "$name rc=$? : $*"
}
# strided (perplexity_v2)
run tiny-llama-F32__c128_b128_stride64 $TF/tiny-llama-F32.gguf -c 128 -b 128 --ppl-stride 64 --chunks 4 -fa off
run tiny-qwen2-F32__c128_b128_stride64 $TF/tiny-qwen2-F32.gguf -c 128 -b 128 --ppl-stride 64 --chunks 4 -fa off
run tiny-mistral3-F32__c128_b128_stride64 $TF/tiny-mistral3-F32.gguf -c 128 -b 128 --ppl-stride 64 --chunks 4 -fa off
run tiny-llama-F32__c128_b64_ub32_stride32 $TF/tiny-llama-F32.gguf -c 128 -b 64 -ub 32 --ppl-stride 32 --chunks 6 -fa off
run tiny-qwen2-F32__c200_b200_stride100_fa $TF/tiny-qwen2-F32.gguf -c 200 -b 200 --ppl-stride 100 --chunks 3 -fa on
run tiny-llama-F32__c128_b128_stride64_type1 $TF/tiny-llama-F32.gguf -c 128 -b 128 --ppl-stride 64 --ppl-output-type 1 --chunks 4 -fa off
run tiny-llama-Q5_K_M__c128_b128_stride64 $T/tiny-llama-Q5_K_M.gguf -c 128 -b 128 --ppl-stride 64 --chunks 4 -fa off
run tiny-qwen2-Q3_K_M__c128_b128_stride64 $T/tiny-qwen2-Q3_K_M.gguf -c 128 -b 128 --ppl-stride 64 --chunks 4 -fa off
run SmolLM2-135M-Instruct.Q4_1__c128_b128_stride64 $R/SmolLM2-135M-Instruct.Q4_1.gguf -c 128 -b 128 --ppl-stride 64 --chunks 3 -fa off
run SmolLM2-135M-Instruct.Q4_1__c128_b128_stride64_chunks1_type1 $R/SmolLM2-135M-Instruct.Q4_1.gguf -c 128 -b 128 --ppl-stride 64 --ppl-output-type 1 --chunks 1 -fa off
run tiny-llama-Q5_K_M__c128_b256_stride64 $T/tiny-llama-Q5_K_M.gguf -c 128 -b 256 --ppl-stride 64 --chunks 3 -fa off
run tiny-llama-Q5_K_M__c512_b1024_stride256 $T/tiny-llama-Q5_K_M.gguf -c 512 -b 1024 --ppl-stride 256 --chunks 2 -fa off
run tiny-llama-Q5_K_M__c2048_stride64 $T/tiny-llama-Q5_K_M.gguf -c 2048 -b 128 --ppl-stride 64 --chunks 2 -fa off
# default mode
run tiny-llama-F32__c256_b256 $TF/tiny-llama-F32.gguf -c 256 -b 256 --chunks 4 -fa off
run tiny-llama-F32__c256_b1024 $TF/tiny-llama-F32.gguf -c 256 -b 1024 --chunks 4 -fa off
run tiny-llama-F32__c256_b256_fa $TF/tiny-llama-F32.gguf -c 256 -b 256 --chunks 4 -fa on
run tiny-qwen2-F32__c128_b512_type1 $TF/tiny-qwen2-F32.gguf -c 128 -b 512 --ppl-output-type 1 --chunks 5 -fa off
run tiny-mistral3-F32__c256_b256_ub64_type1 $TF/tiny-mistral3-F32.gguf -c 256 -b 256 -ub 64 --ppl-output-type 1 --chunks 3 -fa on
run tiny-llama-Q5_K_M__c128_b128 $T/tiny-llama-Q5_K_M.gguf -c 128 -b 128 --chunks 4 -fa off
run tiny-qwen2-Q3_K_M__c256_b256_fa $T/tiny-qwen2-Q3_K_M.gguf -c 256 -b 256 --chunks 4 -fa on
run tiny-llama-Q5_K_M__c2_b2 $T/tiny-llama-Q5_K_M.gguf -c 2 -b 2 --chunks 3 -fa off
run tiny-llama-Q5_K_M__c128_chunks0 $T/tiny-llama-Q5_K_M.gguf -c 128 -b 128 --chunks 0 -fa off
run SmolLM2-135M-Instruct.Q4_1__c256_b1024_fa $R/SmolLM2-135M-Instruct.Q4_1.gguf -c 256 -b 1024 --chunks 4 -fa on
run SmolLM2-135M-Instruct.Q4_1__c256_b256_fa $R/SmolLM2-135M-Instruct.Q4_1.gguf -c 256 -b 256 --chunks 4 -fa on
run qwen2.5-coder-0.5b-instruct-awq-q4_k_m__c256_b256 $R/qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf -c 256 -b 256 --chunks 2 -fa off
run qwen2.5-coder-0.5b-instruct-awq-q4_k_m__c256_b256_type1 $R/qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf -c 256 -b 256 --ppl-output-type 1 --chunks 2 -fa on
# the fixtures' own command (real/perplexity/*__c128.log, made by the AVX-512 build): this build's numbers
run SmolLM2-135M-Instruct.Q4_1__c128_b128 $R/SmolLM2-135M-Instruct.Q4_1.gguf -c 128 -b 128 --chunks 4 -fa off
run qwen2.5-coder-0.5b-instruct-awq-q4_k_m__c128_b128 $R/qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf -c 128 -b 128 --chunks 4 -fa off
