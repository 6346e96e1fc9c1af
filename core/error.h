#pragma once
// brrr's exception types. Library code throws these; only main() catches them and chooses the
// exit code: ConfigError/UsageError/RunDirError -> 2, everything else -> 1.
#include <stdexcept>
#include <string>

namespace brrr {

/// Base of every brrr error. what() is a complete, user-facing sentence with the values involved.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Bad configuration: unknown key, wrong type, out-of-range value, missing key, YAML syntax.
/// The message names the key path and file:line:column.
class ConfigError : public Error {
 public:
  using Error::Error;
  /// An error about `key` found where its place is not known (a value that the data
  /// contradicts): what() is "<key>: <what>". A caller that knows where the key was set rethrows
  /// with the place (config_message()).
  ConfigError(const std::string& key, const std::string& what)
      : Error(key + ": " + what), key_(key), detail_(what) {}
  /// The key and the bare message of the two-argument form ("" otherwise).
  const std::string& key() const { return key_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string key_;
  std::string detail_;
};

/// Bad command line (unknown flag, missing argument).
class UsageError : public Error {
 public:
  using Error::Error;
};

/// The run directory cannot be used as asked: another trainer holds it, or it already holds a
/// run that starting afresh would overwrite.
class RunDirError : public Error {
 public:
  using Error::Error;
};

/// A stop request (SIGINT/SIGTERM) interrupted a wait (for a batch); the state between steps is
/// intact and the caller checkpoints it.
class StopRequested : public Error {
 public:
  using Error::Error;
};

/// Bad or unreadable data: a corrupt image, a short IDX file, a malformed CSV row.
class DataError : public Error {
 public:
  using Error::Error;
};

/// A data-loader worker failed: raised an exception, crashed, was killed, or timed out.
class WorkerError : public DataError {
 public:
  using DataError::DataError;
};

/// A checkpoint could not be written or read.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// Training cannot continue (NaN loss outside fp16 scaling, ...).
class TrainingError : public Error {
 public:
  using Error::Error;
};

}  // namespace brrr
