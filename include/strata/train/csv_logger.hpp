#pragma once
// CsvLogger: one row per epoch (epoch, then every metric of the run) to a CSV file.

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <string>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/train/logs.hpp"
#include "strata/train/monitor.hpp"

namespace strata::train {

class CsvLogger {
 public:
  explicit CsvLogger(std::filesystem::path path, bool append = false) : path_(std::move(path)), append_(append) {}

  void on_train_begin(TrainBegin const& info) {
    chief_ = info.chief();  // only the chief of a job writes the file
    validates_ = info.validation_freq > 0;
    if (!chief_) return;
    bool const had_rows = append_ && std::filesystem::exists(path_) && std::filesystem::file_size(path_) > 0;
    file_.open(path_, append_ ? std::ios::app : std::ios::trunc);
    if (!file_) throw IoError(strata::detail::message(path_.string(), ": CsvLogger cannot open the file for writing"));
    header_written_ = had_rows;
  }

  void on_epoch_end(EpochLogs const& logs) {
    if (!chief_) return;
    // The same columns every epoch: a run validating every few epochs (validation_freq) has
    // its val_* columns from the first row on, "NA" (as Keras writes) where it did not validate.
    std::vector<std::string> names;
    for (auto const& n : logs.names())
      if (!is_validation_metric(n)) names.push_back(n);
    if (validates_)
      for (std::size_t i = 0, train = names.size(); i < train; ++i) names.push_back("val_" + names[i]);
    if (!header_written_) {
      file_ << "epoch";
      for (auto const& n : names) file_ << ',' << n;
      file_ << '\n';
      header_written_ = true;
    }
    file_ << logs.epoch << std::setprecision(9);
    for (auto const& n : names) {
      if (auto const value = logs.get(n)) file_ << ',' << *value;
      else file_ << ",NA";
    }
    file_ << '\n' << std::flush;
    if (!file_) throw IoError(strata::detail::message(path_.string(), ": CsvLogger failed to write epoch ", logs.epoch));
  }

  void on_train_end(History const&) { file_.close(); }

 private:
  std::filesystem::path path_;
  bool append_;
  std::ofstream file_;
  bool header_written_ = false;
  bool chief_ = true;
  bool validates_ = false;
};

}  // namespace strata::train
