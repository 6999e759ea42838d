// unicode_regex_split (llama.cpp src/unicode.cpp) for every pre-tokenizer's regex list on every text.
// input  (argv[1]): {"types": {NAME: {"regexes": [...], "byte_encode": bool}}, "texts": [...]}
// output (stdout):  {NAME: [[n_0, n_1, ...] per text]}: the words' lengths in codepoints (the words tile the
//                   text; split with byte_encode = false), null where unicode_regex_split throws.
// Built against a llama.cpp source tree's src/ (tests/reference/README.md, "regex_split/").
#include "unicode.h"
#include <nlohmann/json.hpp>
#include <fstream>
#include <iostream>
using json = nlohmann::ordered_json;
int main(int argc, char ** argv) {
    if (argc != 2) {
        std::cerr << "usage: regex_split input.json > splits.json\n";
        return 2;
    }
    std::ifstream f(argv[1]);
    json in = json::parse(f);
    json out = json::object();
    for (auto & [name, t] : in["types"].items()) {
        std::vector<std::string> exprs = t["regexes"].get<std::vector<std::string>>();
        json per_text = json::array();
        for (auto & text : in["texts"]) {
            try {
                json lens = json::array();
                for (const auto & w : unicode_regex_split(text.get<std::string>(), exprs, false)) {
                    lens.push_back(unicode_cpts_from_utf8(w).size());
                }
                per_text.push_back(lens);
            } catch (const std::exception &) {
                per_text.push_back(nullptr);  // e.g. a custom splitter's empty result on "" falls to std::regex
            }
        }
        out[name] = per_text;
    }
    std::cout << out.dump() << "\n";
}
