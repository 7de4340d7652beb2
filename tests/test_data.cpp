// Readers (IDX, CSV) on real and damaged files; shuffling, batching and prefetching.
#include <doctest/doctest.h>

#include <chrono>
#include <set>
#include <thread>
#include <string>

#include <zlib.h>

#include "strata.hpp"
#include "temp_dir.hpp"

using namespace strata;

namespace {
std::string idx_bytes(std::vector<std::uint32_t> dims, std::size_t data_bytes) {
  std::string s{'\0', '\0', '\x08', char(dims.size())};
  for (auto d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) s += char((d >> shift) & 0xff);
  for (std::size_t i = 0; i < data_bytes; ++i) s += char(i % 251);
  return s;
}
std::string gzip(std::string const& raw) {
  uLongf size = compressBound(uLong(raw.size())) + 64;
  std::string out(size, '\0');
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // gzip wrapper
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = uInt(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}
std::vector<float> column_ids(data::Batch const& b) {
  std::vector<float> ids;
  for (int j = 0; j < b.size; ++j) ids.push_back(b.features.data[std::size_t(j) * std::size_t(b.features.rows)]);
  return ids;
}
// Feature 0 of sample i is i, the label is i % 3.
Dataset numbered(int n) {
  Matrix x(2, n), y(1, n);
  for (int i = 0; i < n; ++i) {
    x(0, i) = float(i);
    x(1, i) = -float(i);
    y(0, i) = float(i % 3);
  }
  return {x, y};
}
}  // namespace

TEST_CASE("Fashion-MNIST from Debian's package: sizes, pixel range, 6000/1000 images per class") {
  auto train = data::fashion_mnist(data::Split::train);
  auto test = data::fashion_mnist(data::Split::test);
  CHECK(train.size() == 60000);
  CHECK(test.size() == 10000);
  CHECK(train.feature_width() == 784);
  CHECK(train.target_width() == 1);
  auto x = detail::eigen(test.features());
  CHECK(x.minCoeff() == 0.0f);
  CHECK(x.maxCoeff() == 1.0f);
  for (auto [data, per_class] : {std::pair{train, 6000}, std::pair{test, 1000}}) {
    std::vector<int> counts(10);
    auto y = data.targets();
    for (std::size_t i = 0; i < y.size(); ++i) ++counts[std::size_t(y.data[i])];
    for (int c : counts) CHECK(c == per_class);
  }
}

TEST_CASE("IDX: truncated, damaged and missing files name the path and byte offset") {
  TempDir dir;
  auto good = dir.write("good.idx", idx_bytes({4, 2, 3}, 24));
  auto array = data::read_idx(good);
  CHECK(array.dims == std::vector<std::size_t>{4, 2, 3});
  CHECK(array.values.size() == 24);

  auto cut = dir.write("cut.idx", idx_bytes({4, 2, 3}, 20));
  std::string const cut_message = cut.string() + ": byte offset 36: file is truncated: the dimensions promise 24";
  CHECK_THROWS_WITH_AS(data::read_idx(cut), doctest::Contains(cut_message.c_str()), IoError);
  auto header = dir.write("header.idx", std::string("\0\0\x08", 3));
  CHECK_THROWS_WITH_AS(data::read_idx(header), doctest::Contains("byte offset 3: file ends inside the 4-byte IDX header"),
                       IoError);
  auto dims = dir.write("dims.idx", idx_bytes({4, 2, 3}, 0).substr(0, 9));
  CHECK_THROWS_WITH_AS(data::read_idx(dims), doctest::Contains("byte offset 9: file ends inside the dimension list"),
                       IoError);
  auto type = dir.write("type.idx", std::string("\0\0\x0d\x01\0\0\0\0", 8));
  CHECK_THROWS_WITH_AS(data::read_idx(type), doctest::Contains("type code 0xd is not supported"), IoError);
  auto magic = dir.write("magic.idx", "PK\x03\x04 not idx");
  CHECK_THROWS_WITH_AS(data::read_idx(magic), doctest::Contains("byte offset 0: not an IDX file"), IoError);
  auto extra = dir.write("extra.idx", idx_bytes({2}, 5));
  CHECK_THROWS_WITH_AS(data::read_idx(extra), doctest::Contains("byte offset 10: 3 unexpected bytes"), IoError);
  CHECK_THROWS_WITH_AS(data::read_idx(dir.path / "absent.idx"), doctest::Contains("absent.idx: no such file"), IoError);

  // gzip: the whole file works, a cut compressed stream is reported as truncated.
  std::string const compressed = gzip(idx_bytes({1000}, 1000));
  CHECK(data::read_idx(dir.write("ok.idx.gz", compressed)).values.size() == 1000);
  auto torn = dir.write("torn.idx.gz", compressed.substr(0, compressed.size() / 2));
  CHECK_THROWS_WITH_AS(data::read_idx(torn), doctest::Contains("torn.idx.gz: compressed stream ends early"), IoError);
}

TEST_CASE("read_file: the size a gzip trailer records is only a hint") {
  TempDir dir;
  // Two gzip members (what `cat a.gz b.gz` makes): the trailer records the second's size only.
  std::string const first(100000, 'a'), second = "the end";
  auto two = dir.write("two.txt.gz", gzip(first) + gzip(second));
  CHECK(data::read_file(two) == first + second);
  CHECK(data::detail::read_size_hint(two, std::filesystem::file_size(two)) == second.size());
  // A plain file's hint is its size; a gzip file's, what it decompresses to.
  auto plain = dir.write("plain.txt", first);
  CHECK(data::detail::read_size_hint(plain, first.size()) == first.size());
  auto one = dir.write("one.txt.gz", gzip(first));
  CHECK(data::detail::read_size_hint(one, std::filesystem::file_size(one)) == first.size());
  // A trailer that records more than deflate can give is capped, and zlib's length check
  // reports it as damage, naming the file.
  std::string lying = gzip(second);
  for (std::size_t i = lying.size() - 4; i < lying.size(); ++i) lying[i] = '\xff';
  auto liar = dir.write("liar.txt.gz", lying);
  CHECK(data::detail::read_size_hint(liar, lying.size()) == lying.size() * 1032);
  CHECK_THROWS_WITH_AS(data::read_file(liar), doctest::Contains("liar.txt.gz: "), IoError);
}

TEST_CASE("load_idx rejects image and label files that disagree") {
  TempDir dir;
  auto images = dir.write("i.idx", idx_bytes({3, 2, 2}, 12));
  auto labels = dir.write("l.idx", idx_bytes({4}, 4));
  CHECK_THROWS_WITH_AS(data::load_idx(images, labels), doctest::Contains("has 3 images but"), DataError);
  auto ok = data::load_idx(images, dir.write("l3.idx", idx_bytes({3}, 3)), 1.0f);
  CHECK(ok.size() == 3);
  CHECK(ok.feature_width() == 4);
  CHECK(ok.features().data[5] == 5.0f);
}

TEST_CASE("CSV: values, label column, header, gzip, and errors with line, column and byte offset") {
  TempDir dir;
  auto plain = dir.write("a.csv", "x,y,label\n1,2,0\n3.5,-4,1\r\n\n5,6e1,2\n");
  auto d = data::read_csv(plain, {.header = true});
  CHECK(d.size() == 3);
  CHECK(d.feature_width() == 2);
  CHECK(detail::eigen(d.features())(1, 2) == 60.0f);
  CHECK(detail::eigen(d.targets())(0, 1) == 1.0f);
  auto first = data::read_csv(plain, {.label_column = 0, .header = true});
  CHECK(detail::eigen(first.targets())(0, 1) == 3.5f);
  CHECK(data::read_csv(dir.write("a.csv.gz", gzip("1,2,0\n3,4,1\n"))).size() == 2);

  CHECK_THROWS_WITH_AS(data::read_csv(dir.write("b.csv", "1,2,0\n3,x,1\n")),
                       doctest::Contains("b.csv: line 2, column 2 (byte offset 8): 'x' is not a number"), IoError);
  CHECK_THROWS_WITH_AS(data::read_csv(dir.write("c.csv", "1,2,0\n3,4,1\n5,6")),
                       doctest::Contains("c.csv: line 3 (byte offset 12) has 2 fields, the first row has 3; the file looks truncated"),
                       IoError);
  CHECK_THROWS_WITH_AS(data::read_csv(dir.write("e.csv", "")), doctest::Contains("e.csv: byte offset 0: no data rows"),
                       IoError);
  CHECK_THROWS_AS(data::read_csv(dir.write("f.csv", "1,2\n"), {.label_column = 5}), ConfigError);
  CHECK_THROWS_WITH_AS(data::read_csv(dir.path / "missing.csv"), doctest::Contains("missing.csv: no such file"), IoError);
}

TEST_CASE("batches cover every sample exactly once, with the remainder in the last batch") {
  auto data = numbered(23);
  for (bool shuffled : {false, true}) {
    auto batches = (shuffled ? data.shuffle(7) : data).batch(5);
    CHECK(batches.batches_per_epoch() == 5);
    std::multiset<float> seen;
    std::vector<int> sizes;
    for (auto const& b : batches) {
      sizes.push_back(b.size);
      for (float id : column_ids(b)) seen.insert(id);
      for (int j = 0; j < b.size; ++j)  // targets travel with their features
        CHECK(b.targets.data[j] == float(int(b.features.data[std::size_t(j) * 2]) % 3));
    }
    CHECK(sizes == std::vector<int>{5, 5, 5, 5, 3});
    CHECK(seen.size() == 23);
    CHECK(std::set<float>(seen.begin(), seen.end()).size() == 23);
  }
}

TEST_CASE("shuffle is seeded: same seed and epoch give the same order, a new epoch a new one") {
  auto data = numbered(50);
  auto order = [&](std::uint64_t seed, std::int64_t epoch) {
    std::vector<float> ids;
    auto stream = data.shuffle(seed).batch(50).stream(epoch);
    return column_ids(*stream->next());
  };
  CHECK(order(1, 0) == order(1, 0));
  CHECK(order(1, 0) != order(1, 1));
  CHECK(order(1, 0) != order(2, 0));
  std::vector<float> identity(50);
  std::iota(identity.begin(), identity.end(), 0.0f);
  CHECK(order(1, 0) != identity);
  // Range-for over the same BatchedDataset advances the epoch, as tf.data reshuffles each iteration.
  auto batches = data.shuffle(1).batch(50);
  std::vector<std::vector<float>> epochs;
  for (int e = 0; e < 2; ++e)
    for (auto const& b : batches) epochs.push_back(column_ids(b));
  CHECK(epochs[0] == order(1, 0));
  CHECK(epochs[1] == order(1, 1));
}

TEST_CASE("prefetching on a background thread yields exactly the batches of the plain stream") {
  auto data = numbered(1001).shuffle(3);
  for (int depth : {1, 2, 5}) {
    auto plain = data.batch(64).stream(4);
    auto ahead = data.batch(64).prefetch(depth).stream(4);
    int count = 0;
    while (auto const* a = plain->next()) {
      auto const* b = ahead->next();
      REQUIRE(b != nullptr);
      CHECK(column_ids(*a) == column_ids(*b));
      CHECK(a->index == b->index);
      ++count;
    }
    CHECK(ahead->next() == nullptr);
    CHECK(count == 16);
  }
  // Abandoning a prefetching stream part-way stops its thread cleanly.
  auto early = data.batch(8).prefetch(3).stream(0);
  CHECK(early->next() != nullptr);
}

TEST_CASE("a stream that holds two batches keeps the previous one intact while the next is gathered") {
  // The Trainer looks one batch ahead (a device copies it during this step's compute): batch
  // k must still hold its samples after next() returned batch k+1, with or without a
  // prefetching thread racing to refill slots, shuffled or in place, from a resumed position.
  for (bool shuffled : {false, true})
    for (int depth : {0, 1, 3})
      for (std::int64_t first : {0, 5}) {
        auto const data = shuffled ? numbered(203).shuffle(9) : numbered(203);
        auto plain = data.batch(16).stream(2, first);
        std::vector<std::vector<float>> expected;
        while (auto const* b = plain->next()) expected.push_back(column_ids(*b));
        auto held = data.batch(16).prefetch(depth).stream(2, first, 2);
        data::Batch const* previous = held->next();
        std::vector<float> previous_ids = column_ids(*previous);
        std::size_t k = 0;
        while (auto const* b = held->next()) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));  // let the producer run ahead
          CHECK(column_ids(*previous) == previous_ids);  // still intact after the next batch arrived
          CHECK(previous_ids == expected[k]);
          CHECK(previous->index == first + std::int64_t(k));
          previous = b;
          previous_ids = column_ids(*b);
          ++k;
        }
        CHECK(previous_ids == expected.back());
        CHECK(k + 1 == expected.size());
      }
  CHECK_THROWS_WITH_AS(numbered(10).batch(2).stream(0, 0, 3), doctest::Contains("held 3 must be 1 or 2"), ConfigError);
}

TEST_CASE("take, skip and the dataset checks") {
  auto data = numbered(10);
  CHECK(column_ids(*data.skip(7).batch(10).stream(0)->next()) == std::vector<float>{7, 8, 9});
  CHECK(data.take(4).size() == 4);
  CHECK(data.take(40).size() == 10);
  CHECK(data.skip(40).empty());
  CHECK(data.skip(40).features().cols == 0);
  CHECK(Dataset().features().cols == 0);
  CHECK_THROWS_AS(Dataset(Matrix::Zero(2, 3), Matrix::Zero(1, 4)), ShapeError);
  CHECK_THROWS_WITH_AS((void)data.batch(0), "batch: global batch size 0 must be at least 1", ConfigError);
}
