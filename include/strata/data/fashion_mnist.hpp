#pragma once
// Fashion-MNIST from Debian's `dataset-fashion-mnist` package: 60,000 training and 10,000
// test images of 28x28 pixels in 10 classes, pixels scaled to [0, 1].

#include <cstdlib>
#include <filesystem>

#include "strata/data/idx.hpp"

namespace strata::data {

enum class Split { train, test };

// Where Debian installs the files; the environment variable STRATA_FASHION_MNIST_DIR overrides it.
inline std::filesystem::path fashion_mnist_directory() {
  if (char const* dir = std::getenv("STRATA_FASHION_MNIST_DIR")) return dir;
  return "/usr/share/datasets/fashion-mnist";
}

inline Dataset fashion_mnist(Split split, std::filesystem::path const& directory = fashion_mnist_directory()) {
  char const* prefix = split == Split::train ? "train" : "t10k";
  return load_idx(directory / (std::string(prefix) + "-images-idx3-ubyte.gz"),
                  directory / (std::string(prefix) + "-labels-idx1-ubyte.gz"));
}

}  // namespace strata::data
