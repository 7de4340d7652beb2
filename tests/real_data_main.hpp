#pragma once
// main() for test programs whose "real data:" cases need files that scripts/fetch-bert-data
// brings (the BERT weights, vocabulary and sentences):
//   program              every case but the real-data ones
//   program --real-data  only those; exits 77 (CTest: skipped) when a file is absent
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <vector>

inline int run_with_real_data(int argc, char** argv, std::initializer_list<std::filesystem::path> needed) {
  bool real_data = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--real-data") == 0) real_data = true;
    else args.push_back(argv[i]);
  }
  doctest::Context context(int(args.size()), args.data());
  if (real_data) {
    for (auto const& file : needed) {
      std::error_code ec;
      if (!std::filesystem::exists(file, ec)) {
        std::printf("skipped: %s is absent; scripts/fetch-bert-data (run by scripts/setup) brings it\n", file.c_str());
        return 77;
      }
    }
    context.addFilter("test-case", "real data:*");
  } else {
    context.addFilter("test-case-exclude", "real data:*");
  }
  return context.run();
}

#define STRATA_REAL_DATA_MAIN(...) \
  int main(int argc, char** argv) { return run_with_real_data(argc, argv, __VA_ARGS__); }
