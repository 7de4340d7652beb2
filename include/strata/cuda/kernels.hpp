#pragma once
// The backend's kernels, compiled at run time by NVRTC for the GPU that is present, cached
// on disk, and loaded once per process.
//
// compile_kernels() needs only libnvrtc, not a GPU or a driver: the tests compile the source
// for every architecture strata supports on machines without a GPU. The disk cache turns
// the ~1 s compile into a file read on every later run; its key hashes the source, the
// options and NVRTC's version, so a changed kernel or toolkit never loads a stale binary, and
// a cache file that does not load is recompiled and replaced.

#include <cuda_runtime.h>
#include <nvrtc.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/cuda/kernel_source.hpp"
#include "strata/cuda/runtime.hpp"

namespace strata::cuda {

inline void check(nvrtcResult rc, std::string_view what) {
  if (rc != NVRTC_SUCCESS) throw DeviceError(strata::detail::message("NVRTC: ", what, " failed: ", nvrtcGetErrorString(rc)));
}

// The architectures (sm_XY as XY) this NVRTC can compile for.
inline std::vector<int> nvrtc_architectures() {
  int count = 0;
  check(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(std::size_t(count > 0 ? count : 0));
  if (count > 0) check(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  return archs;
}

inline std::string nvrtc_version() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

struct KernelCacheOptions {
  // Where compiled kernels are kept: $STRATA_KERNEL_CACHE, else $XDG_CACHE_HOME/strata/kernels,
  // else ~/.cache/strata/kernels. Empty: no disk cache.
  std::filesystem::path directory = default_directory();
  bool use_cache = true;

  static std::filesystem::path default_directory() {
    if (char const* dir = std::getenv("STRATA_KERNEL_CACHE")) return dir;
    if (char const* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "strata/kernels";
    if (char const* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache/strata/kernels";
    return {};
  }
};

struct CompiledKernels {
  int arch = 0;                 // 90 for sm_90
  std::vector<char> cubin;      // an ELF image for exactly that architecture
  bool from_cache = false;
  std::filesystem::path cache_file;  // empty when not cached
};

namespace detail {

inline std::uint64_t fnv1a(std::string_view text, std::uint64_t hash = 0xcbf29ce484222325ull) {
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

inline std::vector<std::string> nvrtc_options(int arch) {
  // --fmad=false: no fused multiply-adds, so element-wise kernels round exactly like the CPU
  // backend's C++ (they are memory-bound: FMA buys nothing there). IEEE division and sqrt are
  // NVRTC's defaults.
  return {"--gpu-architecture=sm_" + std::to_string(arch), "--std=c++17", "--fmad=false", "--device-as-default-execution-space"};
}

inline std::vector<char> read_file(std::filesystem::path const& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Written to a temporary name and renamed: a reader never sees half a file, and two
// processes compiling at once each leave a whole one.
inline void write_file_atomically(std::filesystem::path const& path, std::vector<char> const& bytes) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return;  // an unwritable cache only costs a recompile next time
  auto const temp = path.string() + ".tmp" + std::to_string(std::uintptr_t(&bytes));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out) {
      std::filesystem::remove(temp, ec);
      return;
    }
  }
  std::filesystem::rename(temp, path, ec);
  if (ec) std::filesystem::remove(temp, ec);
}

inline bool looks_like_elf(std::vector<char> const& bytes) {
  return bytes.size() > 4 && bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F';
}

}  // namespace detail

// Compiles `source` for sm_<arch> into a cubin, or reads it from the disk cache. Needs no GPU.
inline CompiledKernels compile_kernels(int arch, KernelCacheOptions const& cache = {},
                                       std::string_view source = kernel_source, std::string_view module = "strata") {
  auto const options = detail::nvrtc_options(arch);
  std::string key_text(source);
  for (auto const& o : options) key_text += "\n" + o;
  key_text += "\nnvrtc " + nvrtc_version();
  char name[64];
  std::snprintf(name, sizeof name, "%016llx-sm_%d.cubin", static_cast<unsigned long long>(detail::fnv1a(key_text)), arch);

  CompiledKernels result;
  result.arch = arch;
  bool const cached = cache.use_cache && !cache.directory.empty();
  if (cached) {
    result.cache_file = cache.directory / name;
    result.cubin = detail::read_file(result.cache_file);
    if (detail::looks_like_elf(result.cubin)) {
      result.from_cache = true;
      return result;
    }
  }

  nvrtcProgram program = nullptr;
  std::string const text(source);
  check(nvrtcCreateProgram(&program, text.c_str(), "strata_kernels.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> const owner(&program, [](nvrtcProgram* p) { nvrtcDestroyProgram(p); });
  std::vector<char const*> argv;
  for (auto const& o : options) argv.push_back(o.c_str());
  nvrtcResult const rc = nvrtcCompileProgram(program, int(argv.size()), argv.data());
  if (rc != NVRTC_SUCCESS) {
    std::size_t log_size = 0;
    nvrtcGetProgramLogSize(program, &log_size);
    std::string log(log_size, '\0');
    if (log_size) nvrtcGetProgramLog(program, log.data());
    std::string const whose = module == "strata" ? std::string("strata's") : "the " + std::string(module);
    throw DeviceError(strata::detail::message("NVRTC: compiling ", whose, " kernels for sm_", arch, " failed (",
                                              nvrtcGetErrorString(rc), "):\n", log));
  }
  std::size_t size = 0;
  check(nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
  result.cubin.resize(size);
  check(nvrtcGetCUBIN(program, result.cubin.data()), "nvrtcGetCUBIN");
  if (cached) detail::write_file_atomically(result.cache_file, result.cubin);
  return result;
}

// Kernels outside strata's own list: a layer's, in a header beside the layer
// (nn/layer_norm_cuda.hpp). `source` is CUDA C++ for NVRTC, `kernels` the names of its
// extern "C" __global__ functions. A module is an `inline constexpr` object, loaded once
// per architecture on first use and cached on disk like strata's own kernels.
struct KernelModule {
  std::string_view name;  // for messages: "LayerNorm"
  std::string_view source;
  std::span<char const* const> kernels;
};

// Kernels loaded for one architecture: strata's own list, or a module's. A cudaLibrary_t is
// not tied to one device's context: its kernels launch on whichever device of that
// architecture is current.
class KernelLibrary {
 public:
  explicit KernelLibrary(int arch, KernelCacheOptions const& cache = {})
      : KernelLibrary(arch, {"strata", kernel_source, std::span<char const* const>(kernel_names)}, cache) {}
  KernelLibrary(int arch, KernelModule const& module, KernelCacheOptions const& cache = {}) {
    CompiledKernels compiled = compile_kernels(arch, cache, module.source, module.name);
    if (cudaLibraryLoadData(&library_, compiled.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      if (!compiled.from_cache)
        throw DeviceError(strata::detail::message("CUDA: loading the ", module.name, " kernels for sm_", arch, " failed"));
      KernelCacheOptions fresh = cache;  // a damaged cache file: compile again and replace it
      fresh.use_cache = false;
      auto const damaged = compiled.cache_file;
      compiled = compile_kernels(arch, fresh, module.source, module.name);
      detail::write_file_atomically(damaged, compiled.cubin);
      check(cudaLibraryLoadData(&library_, compiled.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
            "cudaLibraryLoadData");
    }
    kernels_.resize(module.kernels.size());
    for (std::size_t k = 0; k < kernels_.size(); ++k)
      check(cudaLibraryGetKernel(&kernels_[k], library_, module.kernels[k]), module.kernels[k]);
  }
  KernelLibrary(KernelLibrary const&) = delete;
  KernelLibrary& operator=(KernelLibrary const&) = delete;
  ~KernelLibrary() {
    if (library_) (void)cudaLibraryUnload(library_);
  }

  [[nodiscard]] cudaKernel_t operator[](Kernel k) const { return kernels_[std::size_t(k)]; }
  [[nodiscard]] cudaKernel_t operator[](std::size_t k) const { return kernels_[k]; }

  // One library per architecture (and module) for the whole process, made on first use.
  static KernelLibrary const& for_arch(int arch) { return cached(arch, nullptr); }
  static KernelLibrary const& for_module(KernelModule const& module, int arch) { return cached(arch, &module); }

 private:
  static KernelLibrary const& cached(int arch, KernelModule const* module) {
    static std::mutex mutex;
    static std::map<std::pair<KernelModule const*, int>, std::unique_ptr<KernelLibrary>> libraries;
    std::lock_guard const lock(mutex);
    auto& slot = libraries[{module, arch}];
    if (!slot) slot = module ? std::make_unique<KernelLibrary>(arch, *module) : std::make_unique<KernelLibrary>(arch);
    return *slot;
  }

  cudaLibrary_t library_ = nullptr;
  std::vector<cudaKernel_t> kernels_;
};

}  // namespace strata::cuda
