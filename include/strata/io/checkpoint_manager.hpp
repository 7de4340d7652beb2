#pragma once
// CheckpointManager: numbered checkpoints in one directory, the newest `max_to_keep` kept.
//
//   strata::CheckpointManager manager("ckpt", /*max_to_keep=*/3);
//   manager.save(state);                        // ckpt/ckpt-<step>.safetensors
//   if (auto restored = manager.restore(state))  // the newest that reads cleanly
//     std::cout << "resumed from " << restored->path << "\n";
//
// One process writes a directory (with several workers, the chief). Writes are atomic, so
// a crash leaves complete files; restore() skips a corrupted or truncated newest file and
// falls back to the one before, reporting what it skipped and why.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/io/atomic_file.hpp"
#include "strata/io/checkpoint.hpp"
#include "strata/io/training_state.hpp"

namespace strata::io {

struct RestoreReport {
  std::filesystem::path path;                                         // the checkpoint loaded
  std::vector<std::pair<std::filesystem::path, std::string>> skipped;  // newer ones that failed, with why
};

// The step of a file named <prefix>-<step>.safetensors, or nullopt for any other name
// (temporary files start with a dot, so they never match).
inline std::optional<std::int64_t> checkpoint_step(std::filesystem::path const& path, std::string const& prefix) {
  std::string const name = path.filename().string();
  std::string const head = prefix + "-", tail = ".safetensors";
  if (name.size() <= head.size() + tail.size() || name.rfind(head, 0) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return std::nullopt;
  std::string const digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18) return std::nullopt;
  return std::stoll(digits);
}

// The numbered checkpoints <prefix>-<step>.safetensors in `directory`, lowest step first;
// none where the directory does not exist (yet). Only reads the directory.
inline std::vector<std::filesystem::path> numbered_checkpoints(std::filesystem::path const& directory,
                                                               std::string const& prefix) {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code error;
  // increment(error): a directory that a writer changes while it is listed never throws.
  for (std::filesystem::directory_iterator it(directory, error), end; !error && it != end; it.increment(error))
    if (auto step = checkpoint_step(it->path(), prefix)) found.emplace_back(*step, it->path());
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

class CheckpointManager {
 public:
  explicit CheckpointManager(std::filesystem::path directory, int max_to_keep = 5, std::string prefix = "ckpt")
      : directory_(std::move(directory)), max_to_keep_(max_to_keep), prefix_(std::move(prefix)) {
    if (max_to_keep_ < 1)
      throw ConfigError(strata::detail::message("CheckpointManager: max_to_keep ", max_to_keep_, " must be >= 1"));
    if (prefix_.empty() || prefix_.find('/') != std::string::npos)
      throw ConfigError(strata::detail::message("CheckpointManager: prefix '", prefix_, "' must be a non-empty file name"));
    std::error_code error;
    std::filesystem::create_directories(directory_, error);
    if (error || !std::filesystem::is_directory(directory_))
      throw IoError(strata::detail::message(directory_.string(), ": cannot create the checkpoint directory",
                                            error ? ": " + error.message() : std::string()));
    // Temporary files of a writer that was killed mid-save: never valid, safe to remove.
    for (auto const& entry : std::filesystem::directory_iterator(directory_, error))
      if (is_abandoned_temporary(entry.path()) && entry.path().filename().string().rfind("." + prefix_ + "-", 0) == 0)
        std::filesystem::remove(entry.path(), error);
  }

  [[nodiscard]] std::filesystem::path const& directory() const { return directory_; }
  [[nodiscard]] int max_to_keep() const { return max_to_keep_; }

  // The path a checkpoint at optimizer step `step` gets.
  [[nodiscard]] std::filesystem::path path_for(std::int64_t step) const {
    return directory_ / (prefix_ + "-" + std::to_string(step) + ".safetensors");
  }

  // Writes `state` as <prefix>-<step>.safetensors (replacing one of the same step), then
  // removes the oldest beyond max_to_keep. Returns the path written.
  std::filesystem::path save(TrainingState const& state) {
    std::filesystem::path const path = path_for(state.progress.step);
    save_checkpoint(path, state);
    auto all = checkpoints();
    std::error_code error;
    for (std::size_t i = 0; i + std::size_t(max_to_keep_) < all.size(); ++i) std::filesystem::remove(all[i], error);
    return path;
  }

  // This manager's checkpoints, oldest (lowest step) first.
  [[nodiscard]] std::vector<std::filesystem::path> checkpoints() const {
    return numbered_checkpoints(directory_, prefix_);
  }

  [[nodiscard]] std::optional<std::filesystem::path> latest() const {
    auto all = checkpoints();
    if (all.empty()) return std::nullopt;
    return all.back();
  }

  // Loads the newest checkpoint that reads cleanly into `state`; a damaged file (IoError)
  // is skipped for the one before it. Returns nullopt when the directory holds none.
  // Throws IoError when every checkpoint is damaged (training from scratch would silently
  // lose the run), and ConfigError/ShapeError at once for a checkpoint of another model.
  template <class Check = void (*)(Progress const&)>
  std::optional<RestoreReport> restore(TrainingState& state, Check&& check = [](Progress const&) {}) const {
    auto const all = checkpoints();
    if (all.empty()) return std::nullopt;
    RestoreReport report;
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      try {
        load_checkpoint(*it, state, check);
        report.path = *it;
        return report;
      } catch (IoError const& e) {
        report.skipped.emplace_back(*it, e.what());
      }
    }
    std::string reasons;
    for (auto const& [path, why] : report.skipped) reasons.append("\n  ").append(why);
    throw IoError(strata::detail::message(directory_.string(), ": no checkpoint could be read:", reasons));
  }

  // Removes every checkpoint of this manager.
  void clear() {
    std::error_code error;
    for (auto const& path : checkpoints()) std::filesystem::remove(path, error);
  }

 private:
  std::filesystem::path directory_;
  int max_to_keep_;
  std::string prefix_;
};

}  // namespace strata::io
