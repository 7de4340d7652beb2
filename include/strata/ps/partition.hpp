#pragma once
// How ParameterServer spreads a model's variables over its servers, as TensorFlow's
// MinSizePartitioner does: each parameter tensor is cut along its first axis into as many
// shards as keep every shard at least `min_shard_bytes` (at most one per server, and never
// more than it has rows), and the shards are placed, largest first, on the server that
// holds the fewest floats so far (ties: the lower index). The result depends only on the
// model's layout and the two numbers, so every process of a job computes the same one.
//
// A shard is a range of the model's arena: rows of a row-major tensor are contiguous. A
// server holds its shards back to back, in arena order (server_ranges).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/nn/layer.hpp"

namespace strata::ps {

struct Shard {
  std::size_t tensor = 0;            // index in Model::parameter_tensors()
  std::size_t begin = 0, end = 0;    // floats [begin, end) of the arena
  int server = 0;
  [[nodiscard]] std::size_t size() const { return end - begin; }
};

struct PartitionOptions {
  std::size_t min_shard_bytes = std::size_t(256) << 10;  // TensorFlow's default: 256 KiB
};

// Copies the floats of `shards` out of the whole-model `arena` to `packed`, back to back
// (a server's storage and its messages); returns the end of what it wrote.
inline float* pack(std::vector<Shard> const& shards, std::span<float const> arena, float* packed) {
  for (auto const& s : shards)
    packed = std::copy(arena.begin() + std::ptrdiff_t(s.begin), arena.begin() + std::ptrdiff_t(s.end), packed);
  return packed;
}
// The inverse: `packed` (bytes, as a message holds them, not necessarily aligned) into the
// shards' places in `arena`; returns the end of what it read.
inline std::byte const* unpack(std::vector<Shard> const& shards, std::byte const* packed, std::span<float> arena) {
  for (auto const& s : shards) {
    std::memcpy(arena.data() + s.begin, packed, s.size() * sizeof(float));
    packed += s.size() * sizeof(float);
  }
  return packed;
}

class Partition {
 public:
  Partition() = default;
  Partition(std::vector<nn::ParameterTensor> const& tensors, int servers, PartitionOptions options = {})
      : servers_(servers) {
    if (servers < 1 || servers > 32767)  // a message names its server in 16 bits
      throw ConfigError(strata::detail::message("ps::Partition: ", servers, " servers; a job needs 1 to 32,767"));
    if (options.min_shard_bytes < sizeof(float))
      throw ConfigError(strata::detail::message("ps::Partition: min_shard_bytes ", options.min_shard_bytes,
                                                " is smaller than one float; use at least 4"));
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      auto const& tensor = tensors[t];
      std::size_t const floats = nn::element_count(tensor.shape);
      if (floats == 0) continue;
      std::size_t const rows = tensor.shape.empty() ? 1 : std::size_t(tensor.shape[0]);
      std::size_t const row = floats / rows;
      std::size_t const by_size = std::max<std::size_t>(1, floats * sizeof(float) / options.min_shard_bytes);
      std::size_t const parts = std::min({by_size, std::size_t(servers), rows});
      for (std::size_t p = 0; p < parts; ++p) {  // rows split as evenly as they go, the first parts one longer
        std::size_t const first = p * (rows / parts) + std::min(p, rows % parts);
        std::size_t const count = rows / parts + (p < rows % parts ? 1 : 0);
        shards_.push_back({t, tensor.offset + first * row, tensor.offset + (first + count) * row, 0});
      }
    }
    // Largest first onto the least-loaded server; a stable order keeps equal shards in arena order.
    std::vector<std::size_t> order(shards_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return shards_[a].size() > shards_[b].size(); });
    floats_.assign(std::size_t(servers), 0);
    for (std::size_t i : order) {
      auto const lightest = std::min_element(floats_.begin(), floats_.end());
      shards_[i].server = int(lightest - floats_.begin());
      *lightest += shards_[i].size();
    }
  }

  [[nodiscard]] int servers() const { return servers_; }
  // Every shard, in arena order.
  [[nodiscard]] std::vector<Shard> const& shards() const { return shards_; }
  // The floats server s holds.
  [[nodiscard]] std::size_t floats(int server) const { return floats_[std::size_t(server)]; }
  // Server s's shards, in arena order: the order its floats are stored and sent in.
  [[nodiscard]] std::vector<Shard> of(int server) const {
    std::vector<Shard> mine;
    for (auto const& s : shards_)
      if (s.server == server) mine.push_back(s);
    return mine;
  }
  // What identifies the layout: the same on every process of a job with the same model and
  // servers, and (almost surely) different otherwise. Messages carry it, so a worker of
  // another job or model is told so instead of corrupting a server.
  [[nodiscard]] std::uint64_t fingerprint() const {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the shards' numbers
    auto mix = [&](std::uint64_t v) {
      for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
    };
    mix(std::uint64_t(servers_));
    for (auto const& s : shards_) {
      mix(s.begin);
      mix(s.end);
      mix(std::uint64_t(s.server));
    }
    return h;
  }

 private:
  int servers_ = 1;
  std::vector<Shard> shards_;
  std::vector<std::size_t> floats_;
};

}  // namespace strata::ps
