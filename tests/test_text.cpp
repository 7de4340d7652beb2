// Text: CSV records with quoted text, labelled text and its stratified split, the Unicode
// layer, and BERT's WordPiece tokenizer, first on small hand-made vocabularies with answers
// worked out by hand, then ("real data:" cases) on all-MiniLM-L6-v2's vocabulary and the
// 4,000 polarity sentences against the ids of Hugging Face's `tokenizers`
// (tests/reference, made by tests/python/make_tokenizer_reference.py).
//
//   test_text              every case but the real-data ones
//   test_text --real-data  only those; exits 77 (CTest: skipped) when the files are absent
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "strata/data/text_dataset.hpp"
#include "strata/text.hpp"
#include "message_of.hpp"
#include "real_data_main.hpp"

using namespace strata;
using data::BertTokenizer;

namespace {


std::vector<std::string> small_vocabulary() {
  return {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "aff", "able", "a", "##a", "the",
          "cafe", ",", "!", "$", "hello", "world", "中", "##b", "b", "x", "ü"};
}

BertTokenizer small_tokenizer(data::BertTokenizerOptions options = {}) { return BertTokenizer(small_vocabulary(), options); }

std::vector<std::string> pieces(BertTokenizer const& t, std::string const& text) { return t.tokenize(text); }
using Pieces = std::vector<std::string>;

}  // namespace

// ---------------------------------------------------------------- CSV records and labelled text

TEST_CASE("CSV records: byte-order mark, quoted fields, doubled quotes, line breaks inside quotes, CRLF") {
  std::string const text = "\xEF\xBB\xBF\"1\",\"say \"\"hi\"\",\nthen go\"\r\n\r\nplain,\"\"\r\n\"-1\",last";
  std::vector<data::CsvRecord> records;
  data::for_each_csv_record(text, "t.csv", ',', [&](data::CsvRecord const& r) { records.push_back(r); });
  REQUIRE(records.size() == 3);
  CHECK(records[0].fields == std::vector<std::string>{"1", "say \"hi\",\nthen go"});
  CHECK(records[0].line == 1);
  CHECK(records[0].field_offsets[1] == 7);
  CHECK(records[1].fields == std::vector<std::string>{"plain", ""});
  CHECK(records[1].line == 4);  // the quoted line break counts, and the blank line is skipped
  CHECK(records[2].fields == std::vector<std::string>{"-1", "last"});
}

TEST_CASE("CSV records: an unclosed quote, text after a closing quote and a bare quote are errors with line and offset") {
  auto parse = [](std::string const& text) {
    return message_of([&] { data::for_each_csv_record(text, "bad.csv", ',', [](data::CsvRecord const&) {}); });
  };
  auto const unclosed = parse("a,b\n\"open,\nstill open");
  CHECK(unclosed.find("bad.csv: line 2 (byte offset 4)") != std::string::npos);
  CHECK(unclosed.find("never closed; the file looks truncated") != std::string::npos);
  auto const after = parse("\"x\"y,1");
  CHECK(after.find("byte offset 3") != std::string::npos);
  CHECK(after.find("'y' after the closing quote") != std::string::npos);
  CHECK(parse("ab\"c,1").find("a quote inside an unquoted field") != std::string::npos);
}

TEST_CASE("read_text_csv: labels by name or index, errors name the line and the expected values") {
  auto const text = "\"1\",\"good, really\"\n\"-1\",\"bad\"\n";
  auto const d = data::parse_text_csv(text, "p.csv", {.text_column = 1, .label_column = 0, .classes = {"-1", "1"}});
  REQUIRE(d.size() == 2);
  CHECK(d.texts[0] == "good, really");
  CHECK(d.labels == std::vector<int>{1, 0});
  auto const unknown = message_of([&] { data::parse_text_csv("\"0\",\"meh\"\n", "p.csv", {.classes = {"-1", "1"}}); });
  CHECK(unknown.find("p.csv: line 1, column 1 (byte offset 0): label '0' is not one of '-1' '1'") != std::string::npos);
  auto const negative = message_of([&] { data::parse_text_csv("-1,meh\n", "p.csv"); });
  CHECK(negative.find("label '-1' is not a class index") != std::string::npos);
  auto const narrow = message_of([&] { data::parse_text_csv("1,a\n2\n", "p.csv"); });
  CHECK(narrow.find("line 2 (byte offset 4) has 1 fields") != std::string::npos);
  CHECK_THROWS_AS(data::parse_text_csv("0,a\n", "p.csv", {.text_column = 0, .label_column = 0}), ConfigError);
  CHECK_THROWS_AS(data::parse_text_csv("", "p.csv"), IoError);
}

TEST_CASE("stratified_split keeps each class's share, covers every sample once and depends only on the seed") {
  std::vector<int> labels;
  for (int i = 0; i < 1000; ++i) labels.push_back(i % 10 < 7 ? 0 : (i % 10 < 9 ? 1 : 2));  // 700 / 200 / 100
  auto const split = data::stratified_split(labels, 0.2, 42);
  CHECK(split.dev.size() == 200);
  CHECK(split.train.size() == 800);
  int dev_counts[3] = {};
  for (auto i : split.dev) ++dev_counts[labels[i]];
  CHECK(dev_counts[0] == 140);
  CHECK(dev_counts[1] == 40);
  CHECK(dev_counts[2] == 20);
  std::set<std::size_t> all(split.train.begin(), split.train.end());
  all.insert(split.dev.begin(), split.dev.end());
  CHECK(all.size() == 1000);
  CHECK(std::is_sorted(split.dev.begin(), split.dev.end()));
  CHECK(data::stratified_split(labels, 0.2, 42).dev == split.dev);
  CHECK(data::stratified_split(labels, 0.2, 43).dev != split.dev);
  CHECK_THROWS_AS(data::stratified_split(labels, 1.0, 1), ConfigError);
  data::TextDataset d{{"a", "b", "c"}, {0, 1, 0}};
  auto const sub = d.subset(std::vector<std::size_t>{2, 0});
  CHECK(sub.texts == std::vector<std::string>{"c", "a"});
  CHECK_THROWS_AS(d.subset(std::vector<std::size_t>{3}), DataError);
}

// ---------------------------------------------------------------- Unicode

TEST_CASE("decode_utf8 reads every sequence length and names the byte offset of invalid ones") {
  std::u32string out;
  data::unicode::decode_utf8("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", out);
  CHECK(out == std::u32string{U'a', 0xE9, 0x20AC, 0x1F600});
  struct Bad {
    std::string bytes;
    std::size_t offset;
  };
  for (auto const& [bytes, offset] : std::vector<Bad>{{"ab\x80", 2},               // stray continuation byte
                                                      {"x\xE2\x82", 1},            // truncated
                                                      {"\xC0\xAF", 0},             // overlong '/'
                                                      {"ok \xED\xA0\x80", 3},      // a surrogate
                                                      {"\xF4\x90\x80\x80", 0}}) {  // past U+10FFFF
    auto const what = message_of([&] { data::unicode::decode_utf8(bytes, out, "line 7"); });
    CHECK_MESSAGE(what.find("line 7: invalid UTF-8 at byte offset " + std::to_string(offset)) != std::string::npos, what);
  }
}

TEST_CASE("nfd decomposes and puts combining marks in canonical order; lowercase maps U+0130 to two characters") {
  std::u32string s{0xE9, U'x', 0x1E9B, 0x0323};  // é, x, long s with dot above, dot below
  data::unicode::nfd(s);
  CHECK(s == std::u32string{U'e', 0x0301, U'x', 0x017F, 0x0323, 0x0307});  // Unicode's own example order
  std::u32string lower;
  for (char32_t c : std::u32string{U'A', 0x130, 0x3A3, 0x1C5}) data::unicode::append_lowercase(lower, c);
  CHECK(lower == std::u32string{U'a', U'i', 0x307, 0x3C3, 0x1C6});
  CHECK(data::unicode::is_whitespace(0x3000));
  CHECK(!data::unicode::is_whitespace(0x200B));  // zero width space is a format character
  CHECK(data::unicode::is_punctuation(0x201C));
  CHECK(!data::unicode::is_punctuation(U'$'));
  CHECK(data::unicode::is_ascii_punctuation(U'$'));
}

// ---------------------------------------------------------------- WordPiece on a small vocabulary

TEST_CASE("WordPiece: longest match first, ## continuations, [UNK] for a word with an unknown part") {
  auto const t = small_tokenizer();
  CHECK(pieces(t, "unaffable") == Pieces{"un", "##aff", "##able"});
  CHECK(pieces(t, "affable able") == Pieces{"aff", "##able", "able"});
  CHECK(pieces(t, "unaffablez the") == Pieces{"[UNK]", "the"});  // one unknown piece spoils the whole word
  CHECK(pieces(t, "ab") == Pieces{"a", "##b"});
}

TEST_CASE("WordPiece: a word over max_input_chars_per_word characters is [UNK], one at the limit is split") {
  auto const t = small_tokenizer();
  auto const at_limit = t.token_ids(std::string(100, 'a'));
  CHECK(at_limit.size() == 100);
  CHECK(t.tokenize(std::string(101, 'a')) == Pieces{"[UNK]"});
  auto const narrow = small_tokenizer({.max_input_chars_per_word = 3});
  CHECK(narrow.tokenize("aaa aaaa") == Pieces{"a", "##a", "##a", "[UNK]"});
  // characters, not bytes: three two-byte characters are still three
  CHECK(narrow.tokenize("\xC3\xBC\xC3\xBC\xC3\xBC").size() == 1);
}

TEST_CASE("BertTokenizer splits punctuation and ASCII symbols, cleans controls and whitespace kinds, spaces CJK") {
  auto const t = small_tokenizer();
  CHECK(pieces(t, "hello,world!") == Pieces{"hello", ",", "world", "!"});
  CHECK(pieces(t, "$hello") == Pieces{"$", "hello"});
  CHECK(pieces(t, "hel\x01lo\tworld\xE3\x80\x80the") == Pieces{"hello", "world", "the"});  // U+0001 dropped, U+3000 a space
  CHECK(pieces(t, "x\xE4\xB8\xADx") == Pieces{"x", "中", "x"});
  CHECK(t.normalize("a\xE2\x80\x8B" "b") == "ab");  // U+200B, a format character, is dropped
}

TEST_CASE("BertTokenizer lowercases and strips accents by default, and follows its options") {
  CHECK(small_tokenizer().normalize("Caf\xC3\xA9 \xC3\x9C") == "cafe u");
  CHECK(small_tokenizer({.strip_accents = false}).normalize("Caf\xC3\xA9 \xC3\x9C") == "caf\xC3\xA9 \xC3\xBC");
  CHECK(small_tokenizer({.lowercase = false}).normalize("Caf\xC3\xA9") == "Caf\xC3\xA9");
  CHECK(small_tokenizer({.lowercase = false, .strip_accents = true}).normalize("Caf\xC3\xA9") == "Cafe");
  CHECK(pieces(small_tokenizer(), "CAF\xC3\x89") == Pieces{"cafe"});
}

TEST_CASE("special tokens written in the text are those tokens") {
  auto const t = small_tokenizer();
  CHECK(pieces(t, "hello [MASK] world[SEP]") == Pieces{"hello", "[MASK]", "world", "[SEP]"});
  CHECK(pieces(t, "[mask]") == Pieces{"[UNK]", "[UNK]", "[UNK]"});  // only the exact spelling; "mask" is not in the vocabulary
}

TEST_CASE("encode: [CLS] ... [SEP], truncation, padding, mask and lengths; the same on any number of threads") {
  auto const t = small_tokenizer();
  std::vector<std::string> texts{"hello world", "unaffable able the cafe", ""};
  auto const e = t.encode(texts, 5, 1);
  CHECK(e.count == 3);
  CHECK(std::vector<std::int32_t>(e.ids_of(0).begin(), e.ids_of(0).end()) == std::vector<std::int32_t>{2, 17, 18, 3, 0});
  CHECK(std::vector<std::uint8_t>(e.mask_of(0).begin(), e.mask_of(0).end()) == std::vector<std::uint8_t>{1, 1, 1, 1, 0});
  CHECK(std::vector<std::int32_t>(e.ids_of(1).begin(), e.ids_of(1).end()) == std::vector<std::int32_t>{2, 5, 6, 7, 3});
  CHECK(std::vector<std::int32_t>(e.ids_of(2).begin(), e.ids_of(2).end()) == std::vector<std::int32_t>{2, 3, 0, 0, 0});
  CHECK(e.lengths == std::vector<std::int32_t>{4, 5, 2});
  auto const d = e.to_dataset(std::vector<int>{0, 1, 0});  // the model's input: ids as floats, a column per sequence
  CHECK(d.size() == 3);
  CHECK(d.features().data[5] == 2.0f);  // sequence 1 starts with [CLS]
  CHECK(d.features().data[6] == 5.0f);
  CHECK_THROWS_AS(e.to_dataset(std::vector<int>{0, 1}), DataError);
  std::vector<std::string> many;
  for (int i = 0; i < 1000; ++i) many.push_back(i % 3 ? "hello unaffable, world!" : "the cafe ab " + std::string(i % 7, 'a'));
  auto const one = t.encode(many, 12, 1), four = t.encode(many, 12, 4);
  CHECK(one.ids == four.ids);
  CHECK(one.attention_mask == four.attention_mask);
  CHECK_THROWS_AS(t.encode(texts, 1), ConfigError);
}

TEST_CASE("encode: invalid UTF-8 names the text and the byte offset, on any thread") {
  auto const t = small_tokenizer();
  std::vector<std::string> texts(500, "hello world");
  texts[321] = "hello [SEP] wor\xFFld";
  for (unsigned threads : {1u, 4u}) {
    auto const what = message_of([&] { t.encode(texts, 8, threads); });
    CHECK_MESSAGE(what.find("text 321: invalid UTF-8 at byte offset 15") != std::string::npos, what);
  }
}

TEST_CASE("BertTokenizer refuses a vocabulary without its special tokens and a non-BERT tokenizer_config") {
  auto const missing = message_of([] { BertTokenizer({"[PAD]", "[CLS]", "[SEP]", "a"}); });
  CHECK(missing.find("the unk_token '[UNK]' is not in the vocabulary") != std::string::npos);
  CHECK_THROWS_AS(BertTokenizer({}), ConfigError);
  auto const gpt = message_of([] { BertTokenizer::options_from_config(R"({"tokenizer_class": "GPT2Tokenizer"})", "c.json"); });
  CHECK(gpt.find("c.json: tokenizer_class is \"GPT2Tokenizer\"") != std::string::npos);
  auto const options = BertTokenizer::options_from_config(
      R"({"do_lower_case": false, "strip_accents": null, "unk_token": {"content": "<unk>", "lstrip": false}})", "c.json");
  CHECK(!options.lowercase);
  CHECK(!options.strip_accents.has_value());
  CHECK(options.unk_token == "<unk>");
  CHECK_THROWS_AS(BertTokenizer::options_from_config(R"({"do_lower_case": "yes"})", "c.json"), IoError);
  auto const absent = message_of([] { BertTokenizer::from_directory("/nonexistent/model"); });
  CHECK(absent.find("/nonexistent/model/vocab.txt: no such file") != std::string::npos);
  CHECK(absent.find("scripts/fetch-bert-data") != std::string::npos);
}

// ---------------------------------------------------------------- real data (skipped when absent)

namespace {
std::filesystem::path reference(char const* name) { return std::filesystem::path(STRATA_TEST_REFERENCE_DIR) / name; }
}  // namespace

TEST_CASE("real data: the polarity file has 4,000 sentences, half of each class, and splits 1,600/400 per class") {
  auto const d = data::sentence_polarity();
  REQUIRE(d.size() == 4000);
  CHECK(std::count(d.labels.begin(), d.labels.end(), 1) == 2000);
  CHECK(d.texts[0].starts_with("the rock is destined to be the 21st century's new \" conan \""));
  CHECK(d.labels[0] == 1);
  auto const split = data::stratified_split(d.labels, 0.2, 1);
  CHECK(split.dev.size() == 800);
  // The example's split, as benchmarks/anchors/torch_bert.py recomputes it in Python.
  auto const example = data::stratified_split(d.labels, 0.2, 2026);
  CHECK(std::accumulate(example.dev.begin(), example.dev.end(), std::size_t{0}) == 1592243);
  CHECK(std::vector<std::size_t>(example.dev.begin(), example.dev.begin() + 5) == std::vector<std::size_t>{4, 8, 14, 17, 18});
  auto const dev = d.subset(split.dev);
  CHECK(std::count(dev.labels.begin(), dev.labels.end(), 1) == 400);
}

TEST_CASE("real data: all 4,000 sentences tokenize to the ids of Hugging Face's tokenizers, on 2 threads") {
  auto const t = BertTokenizer::from_directory(data::minilm_directory());
  CHECK(t.vocab_size() == 30522);
  CHECK(t.options().lowercase);
  auto const d = data::sentence_polarity();
  std::istringstream lines(data::read_file(reference("polarity_token_ids.txt.gz")));
  std::vector<std::vector<std::int32_t>> expected;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    expected.emplace_back(std::istream_iterator<std::int32_t>(ids), std::istream_iterator<std::int32_t>());
  }
  REQUIRE(expected.size() == d.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < d.size(); ++i)
    if (t.token_ids(d.texts[i]) != expected[i] && ++mismatches <= 5) MESSAGE("sentence " << i << ": " << d.texts[i]);
  CHECK(mismatches == 0);
  std::size_t const max_length = 64;
  auto const e = t.encode(d.texts, max_length, 2);
  for (std::size_t i = 0; i < d.size(); ++i) {
    std::vector<std::int32_t> want{t.cls_id()};
    want.insert(want.end(), expected[i].begin(), expected[i].begin() + std::ptrdiff_t(std::min(expected[i].size(), max_length - 2)));
    want.push_back(t.sep_id());
    CHECK(e.lengths[i] == std::int32_t(want.size()));
    want.resize(max_length, t.pad_id());
    if (!std::equal(want.begin(), want.end(), e.ids_of(i).begin())) {
      FAIL_CHECK("encoding of sentence " << i << " differs");
      break;
    }
  }
}

TEST_CASE("real data: hard cases (accents, CJK, controls, symbols, long words, special tokens) match tokenizers") {
  auto const t = BertTokenizer::from_directory(data::minilm_directory());
  auto const doc = io::json::parse(data::read_file(reference("tokenizer_cases.json")), "tokenizer_cases.json");
  std::uint64_t max_length = 0;
  REQUIRE(doc.find("max_length")->as_size(max_length, 1 << 20));
  auto ints = [](io::json::Value const& array) {
    std::vector<std::int32_t> out;
    for (auto const& v : array.items) {
      std::uint64_t id = 0;
      REQUIRE(v.as_size(id, 1 << 30));
      out.push_back(std::int32_t(id));
    }
    return out;
  };
  auto const& cases = doc.find("cases")->items;
  REQUIRE(cases.size() > 20);
  for (auto const& c : cases) {
    std::string const& text = c.find("text")->text;
    CHECK_MESSAGE(t.token_ids(text) == ints(*c.find("ids")), text);
    auto const e = t.encode(std::vector<std::string>{text}, max_length, 1);
    CHECK_MESSAGE(std::vector<std::int32_t>(e.ids.begin(), e.ids.end()) == ints(*c.find("encoding")), text);
    auto const mask = ints(*c.find("attention_mask"));
    CHECK_MESSAGE(std::equal(mask.begin(), mask.end(), e.attention_mask.begin()), text);
  }
}

STRATA_REAL_DATA_MAIN({data::minilm_directory() / "vocab.txt", data::sentence_polarity_file()})
