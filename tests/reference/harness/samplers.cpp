// Runs llama.cpp's samplers (public API of libllama, commit 0c1e570) on synthetic logits with many ties and
// prints the selected ids and the last step's candidates as JSON lines: a reference for synapse's port.
// usage: samplers VOCAB.gguf [continuous] > samplers.jsonl
#include "llama.h"
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <random>
#include <string>
#include <vector>
#include <functional>

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

int main(int argc, char ** argv) {
    // "continuous": logits (u >> 8) / 2^21 - 4 (2^24 values in [-4, 4), few ties: the float orders of entropy and
    // the other sums show), instead of u % 64 / 8 - 4
    const bool continuous = argc > 2 && strcmp(argv[2], "continuous") == 0;
    std::mt19937 gen2(43);  // (the temp_ext_rows case's logits)
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const uint32_t seed = 1234;
    const char * breakers[] = {"\n", ":", "\"", "*"};
    llama_logit_bias lb[] = {{5, 4.5f}, {10, -INFINITY}, {5, 1.0f}, {-3, 2.0f}};

    std::vector<std::pair<std::string, std::function<void(llama_sampler *)>>> cases = {
        {"default", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_top_k(40)); llama_sampler_chain_add(c, llama_sampler_init_top_p(0.95f, 0)); llama_sampler_chain_add(c, llama_sampler_init_min_p(0.05f, 0)); llama_sampler_chain_add(c, llama_sampler_init_temp_ext(0.8f, 0.0f, 1.0f)); llama_sampler_chain_add(c, llama_sampler_init_dist(seed)); }},
        {"top_p_unsorted", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_top_p(0.9f, 0)); llama_sampler_chain_add(c, llama_sampler_init_dist(seed)); }},
        {"min_p_unsorted", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_min_p(0.3f, 0)); llama_sampler_chain_add(c, llama_sampler_init_dist(seed)); }},
        {"typical", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_typical(0.6f, 1)); llama_sampler_chain_add(c, llama_sampler_init_dist(seed)); }},
        {"xtc", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_top_k(50)); llama_sampler_chain_add(c, llama_sampler_init_xtc(0.7f, 0.05f, 0, seed)); llama_sampler_chain_add(c, llama_sampler_init_dist(seed)); }},
        {"dynatemp", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_top_k(100)); llama_sampler_chain_add(c, llama_sampler_init_temp_ext(0.9f, 0.5f, 1.3f)); llama_sampler_chain_add(c, llama_sampler_init_dist(seed)); }},
        {"top_n_sigma", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_top_n_sigma(1.5f)); llama_sampler_chain_add(c, llama_sampler_init_top_k(30)); llama_sampler_chain_add(c, llama_sampler_init_dist(seed)); }},
        {"mirostat", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_temp(0.9f)); llama_sampler_chain_add(c, llama_sampler_init_mirostat(n_vocab, seed, 5.0f, 0.1f, 100)); }},
        {"mirostat_v2", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_temp(0.7f)); llama_sampler_chain_add(c, llama_sampler_init_mirostat_v2(seed, 4.0f, 0.2f)); }},
        {"penalties", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_penalties(n_vocab, 16, 1.3f, 0.2f, 0.3f)); llama_sampler_chain_add(c, llama_sampler_init_top_k(40)); llama_sampler_chain_add(c, llama_sampler_init_dist(seed)); }},
        {"dry", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_dry(vocab, 0.8f, 1.75f, 2, 64, breakers, 4)); llama_sampler_chain_add(c, llama_sampler_init_top_k(40)); llama_sampler_chain_add(c, llama_sampler_init_dist(seed)); }},
        {"logit_bias", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_logit_bias(n_vocab, 4, lb)); llama_sampler_chain_add(c, llama_sampler_init_top_k(40)); llama_sampler_chain_add(c, llama_sampler_init_dist(seed)); }},
        {"adaptive_p", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_top_k(60)); llama_sampler_chain_add(c, llama_sampler_init_adaptive_p(0.3f, 0.9f, seed)); }},
        {"top_k_200", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_top_k(200)); llama_sampler_chain_add(c, llama_sampler_init_temp_ext(1.2f, 0.0f, 1.0f)); llama_sampler_chain_add(c, llama_sampler_init_dist(seed)); }},
        {"greedy_ties", [&](llama_sampler * c) { llama_sampler_chain_add(c, llama_sampler_init_top_k(40)); llama_sampler_chain_add(c, llama_sampler_init_temp_ext(0.0f, 0.0f, 1.0f)); llama_sampler_chain_add(c, llama_sampler_init_dist(seed)); }},
    };

    for (auto & cs : cases) {
        llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
        cs.second(chain);
        std::mt19937 gen(42);  // the logits: u % 64 / 8 - 4 (64 values: many ties), +3 for the last 3 accepted tokens
        std::vector<llama_token> hist;
        for (int i = 0; i < 30; i++) {  // a "prompt" with repetitions
            llama_token t = (llama_token) (i % 7 == 6 ? 1 + (gen() % 50) : 11 + i % 4);
            llama_sampler_accept(chain, t);
            hist.push_back(t);
        }
        std::vector<llama_token_data> cur(n_vocab);
        std::vector<int> ids;
        llama_token_data_array arr;
        for (int step = 0; step < 24; step++) {
            for (int i = 0; i < n_vocab; i++) {
                const uint32_t u = gen();
                cur[i] = {i, continuous ? (float)(u >> 8) * (1.0f / 2097152.0f) - 4.0f : (float)(u % 64) / 8.0f - 4.0f, 0.0f};
            }
            for (size_t k = hist.size() - 3; k < hist.size(); k++) cur[hist[k]].logit += 3.0f;
            arr = {cur.data(), cur.size(), -1, false};
            llama_sampler_apply(chain, &arr);
            llama_token id = arr.data[arr.selected].id;
            llama_sampler_accept(chain, id);
            hist.push_back(id);
            ids.push_back(id);
        }
        printf("{\"case\": \"%s\", \"ids\": [", cs.first.c_str());
        for (size_t i = 0; i < ids.size(); i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("], \"size\": %zu, \"selected\": %ld, \"head\": [", arr.size, (long) arr.selected);
        for (size_t i = 0; i < arr.size && i < 64; i++)
            printf("%s[%d, \"%08x\", \"%08x\"]", i ? ", " : "", arr.data[i].id, fbits(arr.data[i].logit), fbits(arr.data[i].p));
        printf("]}\n");
        llama_sampler_free(chain);
    }
    if (continuous) {
        // the dynamic temperature alone on 100 rows of 1000 logits (gen continued): its entropy sum's float order
        // decides the last bits of every scaled logit; printed: the first candidate's logit bits per row
        printf("{\"case\": \"temp_ext_rows\", \"bits\": [");
        std::vector<llama_token_data> row(1000);
        for (int r = 0; r < 100; r++) {
            for (int i = 0; i < 1000; i++) {
                row[i] = {i, (float)(gen2() >> 8) * (1.0f / 2097152.0f) - 4.0f, 0.0f};
            }
            llama_token_data_array a = {row.data(), row.size(), -1, false};
            llama_sampler * s = llama_sampler_init_temp_ext(0.9f, 0.5f, 1.3f);
            llama_sampler_apply(s, &a);
            llama_sampler_free(s);
            printf("%s\"%08x\"", r ? ", " : "", fbits(a.data[0].logit));
        }
        printf("]}\n");
    }
    llama_model_free(model);
    return 0;
}
