// Core pieces: 16-bit types, randomness, the CPU backend's GEMM against a naive loop, intra-op splits.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "random_matrix.hpp"
#include "strata.hpp"

using namespace strata;

TEST_CASE("bf16 rounds to nearest even and keeps specials") {
  CHECK(float(bf16(1.0f)) == 1.0f);
  CHECK(float(bf16(-2.5f)) == -2.5f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties to even (1).
  CHECK(float(bf16(1.0f + 1.0f / 256)) == 1.0f);
  CHECK(float(bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
  CHECK(std::isinf(float(bf16(std::numeric_limits<float>::infinity()))));
  CHECK(std::isnan(float(bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(sizeof(bf16) == 2);
}

TEST_CASE("fp16 converts exactly where it can, rounds, saturates to inf, keeps subnormals") {
  for (float v : {0.0f, 1.0f, -1.0f, 0.5f, 65504.0f, 1024.0f, 3.140625f, 6.103515625e-05f, 5.9604644775390625e-08f})
    CHECK(float(fp16(v)) == v);
  CHECK(float(fp16(1.0f + 1.0f / 4096)) == 1.0f);  // below half an ulp
  CHECK(float(fp16(70000.0f)) == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(float(fp16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(fp16(-0.0f).bits == 0x8000);
  for (int bits = 0; bits < 0x7c00; bits += 7) {  // every finite positive half round-trips
    fp16 h;
    h.bits = std::uint16_t(bits);
    CHECK(fp16(float(h)).bits == h.bits);
  }
}

// The VmFlags of the mapping of /proc/self/smaps that holds `address` ("" where none does).
std::string mapping_flags(void const* address) {
  std::ifstream smaps("/proc/self/smaps");
  std::uintptr_t const at = reinterpret_cast<std::uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 && line.find(' ') > line.find('-')) inside = begin <= at && at < end;
    else if (inside && line.starts_with("VmFlags:")) return line;
  }
  return "";
}

TEST_CASE("aligned arrays are zeroed and aligned; from 2 MiB they start on a huge page and ask for huge pages") {
  AlignedBuffer small(1000);
  CHECK(reinterpret_cast<std::uintptr_t>(small.data()) % 64 == 0);
  CHECK(std::all_of(small.data(), small.data() + small.size(), [](float x) { return x == 0.0f; }));
  std::size_t const floats = (std::size_t(5) << 20) / sizeof(float) + 3;  // 5 MiB and a bit: a partly used last page
  AlignedBuffer large(floats);
  CHECK(reinterpret_cast<std::uintptr_t>(large.data()) % (std::size_t(2) << 20) == 0);
  CHECK(std::all_of(large.data(), large.data() + floats, [](float x) { return x == 0.0f; }));
  large.data()[floats - 1] = 7.0f;  // every float is writable
  AlignedBuffer const copied = large;
  CHECK(copied.data()[floats - 1] == 7.0f);
  AlignedArray<bf16> halves((std::size_t(2) << 20) / sizeof(bf16));
  CHECK(reinterpret_cast<std::uintptr_t>(halves.data()) % (std::size_t(2) << 20) == 0);
  CHECK(halves.data()[halves.size() - 1].bits == 0);
  CHECK(AlignedArray<bf16>().empty());
#if defined(__linux__)
  // "hg": the mapping is advised for huge pages (whether the kernel then gives them is its
  // setting; /sys/kernel/mm/transparent_hugepage/enabled = never refuses them all).
  if (std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    CHECK(mapping_flags(large.data()).find(" hg") != std::string::npos);
    CHECK(mapping_flags(halves.data()).find(" hg") != std::string::npos);
  }
#endif
}

#if defined(__linux__)
// How many of the 4 KiB pages of [data, data + bytes) are in memory (mincore).
std::size_t resident_pages(void const* data, std::size_t bytes) {
  std::size_t const pages = (bytes + 4095) / 4096;
  std::vector<unsigned char> in_memory(pages);
  REQUIRE(::mincore(const_cast<void*>(data), pages * 4096, in_memory.data()) == 0);
  return std::size_t(std::count_if(in_memory.begin(), in_memory.end(), [](unsigned char c) { return (c & 1) != 0; }));
}
#endif

TEST_CASE("a large aligned array costs memory only where it is written") {
#if defined(__linux__)
  std::size_t const floats = (std::size_t(16) << 20) / sizeof(float);  // 16 MiB: eight huge pages
  if (!detail::mapped(floats * sizeof(float))) {
    MESSAGE("skipped: arrays come from operator new (AddressSanitizer watches them)");
    return;
  }
  AlignedBuffer array(floats);
  CHECK(resident_pages(array.data(), floats * sizeof(float)) == 0);  // nothing written at construction
  array.data()[floats / 2] = 1.0f;                                     // one float in the fifth huge page
  std::size_t const resident = resident_pages(array.data(), floats * sizeof(float));
  CHECK(resident >= 1);
  CHECK(resident <= 512);  // that page: 4 KiB, or 2 MiB where the kernel gave a huge page
  CHECK(array.data()[floats / 2 - 1] == 0.0f);
  CHECK(array.data()[floats - 1] == 0.0f);
#else
  MESSAGE("skipped: not Linux");
#endif
}

TEST_CASE("a large array in small pages costs 4 KiB where it is written, wherever that is") {
#if defined(__linux__)
  std::size_t const floats = (std::size_t(16) << 20) / sizeof(float);  // 16 MiB
  if (!detail::mapped(floats * sizeof(float))) {
    MESSAGE("skipped: arrays come from operator new (AddressSanitizer watches them)");
    return;
  }
  AlignedBuffer array(floats, Pages::small);
  CHECK(resident_pages(array.data(), floats * sizeof(float)) == 0);
  // A float at the start of each 2 MiB: in huge pages that would be all 16 MiB.
  std::size_t const huge = detail::huge_page_bytes / sizeof(float);
  for (std::size_t at = 0; at < floats; at += huge) array.data()[at] = 1.0f;
  CHECK(resident_pages(array.data(), floats * sizeof(float)) == floats / huge);
  CHECK(array.data()[1] == 0.0f);
#else
  MESSAGE("skipped: not Linux");
#endif
}

TEST_CASE("counter-based randomness depends only on its inputs") {
  CHECK(mix64(1, 2) == mix64(1, 2));
  CHECK(mix64(1, 2) != mix64(2, 1));
  Rng a(5), b(5);
  for (int i = 0; i < 10; ++i) CHECK(a() == b());
  double sum = 0;
  Rng c(9);
  for (int i = 0; i < 10000; ++i) sum += c.uniform();
  CHECK(sum / 10000 == doctest::Approx(0.5).epsilon(0.02));
}

// Without an intra-op team, and with one of 3 threads bound (core/intra_op.hpp): the largest
// shape is then split into parts of output columns, over every combination of transposes.
TEST_CASE("CpuBackend::gemm matches a naive triple loop for every transpose and beta, and empty inner sizes") {
  Rng rng(3);
  auto random = [&](int r, int c) { return random_matrix(rng, r, c); };
  comm::ThreadGroup team_threads(3);
  IntraOpTeam const team = team_threads.intra_op_team();
  for (IntraOpTeam const* bound : {static_cast<IntraOpTeam const*>(nullptr), &team})
  for (auto ta : {Transpose::no, Transpose::yes})
    for (auto tb : {Transpose::no, Transpose::yes})
      for (float beta : {0.0f, 1.0f, 0.5f})
        for (auto [m, n, k] : {std::array{5, 7, 3}, std::array{70, 33, 129}, std::array{96, 230, 129}}) {
        // Eigen's small-product path, a GEMM, and one large enough to split
        IntraOpBinding const binding(bound);
        CHECK(CpuBackend::split_parts(m, n, k) == (bound && n == 230 ? 3 : 1));
        Matrix a = ta == Transpose::no ? random(m, k) : random(k, m);
        Matrix b = tb == Transpose::no ? random(k, n) : random(n, k);
        Matrix c = random(m, n), expected = c;
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            double s = 0;
            for (int p = 0; p < k; ++p)
              s += double(ta == Transpose::no ? a(i, p) : a(p, i)) * double(tb == Transpose::no ? b(p, j) : b(j, p));
            expected(i, j) = float(2.0 * s + double(beta) * double(c(i, j)));
          }
        CpuBackend::gemm(ta, tb, 2.0f, view(a), view(b), beta, view(c));
        CHECK((c - expected).cwiseAbs().maxCoeff() < 2e-5f);
      }
  Matrix a(4, 0), b(0, 3), c = Matrix::Constant(4, 3, 7.0f);
  CpuBackend::gemm(Transpose::no, Transpose::no, 1.0f, view(a), view(b), 0.0f, view(c));
  CHECK(c.isZero());
}

TEST_CASE("an intra-op team runs every part once, on distinct threads, the first on the caller") {
  comm::ThreadGroup team_threads(3);
  IntraOpTeam const team = team_threads.intra_op_team();
  CHECK(team.threads == 3);
  for (int parts : {1, 2, 3, 7}) {
    std::vector<int> runs(std::size_t(parts), 0);
    std::vector<std::thread::id> where(static_cast<std::size_t>(parts), std::thread::id{});
    IntraOpBinding const binding(&team);
    run_intra_op(parts, [&](int p) {
      ++runs[std::size_t(p)];
      where[std::size_t(p)] = std::this_thread::get_id();
    });
    CHECK(std::count(runs.begin(), runs.end(), 1) == parts);
    CHECK(where[0] == std::this_thread::get_id());
    if (parts >= 3) CHECK((where[0] != where[1] && where[1] != where[2] && where[0] != where[2]));
    if (parts == 7) CHECK(where[3] == where[0]);  // part p on thread p mod 3
  }
  CHECK(intra_op_team() == nullptr);  // the binding ended with its scope
  // Columns split in order, the first parts one longer.
  CHECK(split_columns(10, 3, 0).first == 0);
  CHECK(split_columns(10, 3, 0).count == 4);
  CHECK(split_columns(10, 3, 2).first == 7);
  CHECK(split_columns(10, 3, 2).count == 3);
  CHECK(available_cores() >= 1);
}

// Element-wise work (bias, activations, row sums, the mixed pass's roundings) splits over a
// bound team from min_split_floats and gives the same bits as on one thread: each part
// computes its own elements, and a row adds its columns in one order whatever the split.
TEST_CASE("element-wise work and row sums split over a team give one thread's bits") {
  Rng rng(11);
  comm::ThreadGroup team_threads(3);
  IntraOpTeam const team = team_threads.intra_op_team();
  for (auto [rows, cols] : {std::array{1024, 128}, std::array{1000, 301}, std::array{10, 256}, std::array{77, 1}}) {
    Matrix const x = random_matrix(rng, rows, cols), dy = random_matrix(rng, rows, cols);
    Matrix const bias = random_matrix(rng, rows, 1);
    auto run = [&](IntraOpTeam const* bound) {
      IntraOpBinding const binding(bound);
      Matrix y = x, relu(rows, cols), relu_dx(rows, cols), gelu(rows, cols), gelu_dx(rows, cols), sums = bias;
      CpuBackend::add_bias(view(y), bias.data());
      nn::ActivationMath<CpuBackend>::relu(view(x), view(relu));
      nn::ActivationMath<CpuBackend>::relu_backward(view(x), view(dy), view(relu_dx));
      nn::ActivationMath<CpuBackend>::gelu(view(x), view(gelu));
      nn::ActivationMath<CpuBackend>::gelu_backward(view(x), view(dy), view(gelu_dx));
      CpuBackend::row_sums(view(x), 0.5f, sums.data());
      return std::array{y, relu, relu_dx, gelu, gelu_dx, sums};
    };
    auto const alone = run(nullptr), split = run(&team);
    for (std::size_t i = 0; i < alone.size(); ++i) CHECK(alone[i] == split[i]);
    // The row sums against a double-precision sum.
    for (int r = 0; r < rows; ++r) CHECK(double(alone[5](r)) == doctest::Approx(0.5 * bias(r) + x.row(r).cast<double>().sum()).epsilon(1e-4));
  }
  // It does split, and only from min_split_floats; a split inside a part runs on the part's thread.
  IntraOpBinding const binding(&team);
  std::vector<std::thread::id> where(3);
  run_split_columns(1024, 300, [&](int first, int) { where[std::size_t(first / 100)] = std::this_thread::get_id(); });
  CHECK((where[0] != where[1] && where[1] != where[2] && where[0] != where[2]));
  int parts = 0;
  run_split_floats(std::size_t(min_split_floats) - 1, [&](std::size_t, std::size_t) { ++parts; });
  CHECK(parts == 1);
  std::atomic<int> inner{0}, elsewhere{0};
  run_split_floats(std::size_t(4 * min_split_floats), [&](std::size_t, std::size_t) {
    auto const outer = std::this_thread::get_id();
    run_split_floats(std::size_t(4 * min_split_floats), [&](std::size_t, std::size_t) {
      if (std::this_thread::get_id() != outer) ++elsewhere;
      ++inner;
    });
  });
  CHECK(inner == 3);  // one inner part per outer part: the team was taken
  CHECK(elsewhere == 0);
}
