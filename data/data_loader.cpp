#include "data/data_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/shm_ring.h"
#include "data/worker_pool.h"

namespace brrr {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPollMillis = 100;  // dead workers are noticed within about this long

// "Every slot is held by the caller": a usage error that leaves the loader usable.
class SlotsExhausted : public Error {
 public:
  using Error::Error;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The scheduler state of process `pid` as /proc shows it ("stopped", "running", ...).
std::string process_state(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  std::getline(in, stat);
  const size_t close = stat.rfind(')');  // the command name may contain spaces and parentheses
  if (close == std::string::npos || close + 2 >= stat.size()) return "state unknown";
  switch (stat[close + 2]) {
    case 'R':
      return "running";
    case 'S':
      return "sleeping";
    case 'D':
      return "in uninterruptible I/O wait";
    case 'T':
      return "stopped (SIGSTOP/SIGTSTP; SIGCONT resumes it)";
    case 't':
      return "stopped by a debugger";
    case 'Z':
      return "exited (zombie)";
    default:
      return fmt::format("state {}", stat[close + 2]);
  }
}

}  // namespace

void DataLoaderOptions::validate() const {
  auto bad = [](const std::string& what) { throw ConfigError("DataLoaderOptions: " + what); };
  if (batch_size_ < 1) bad(fmt::format("batch_size must be >= 1, got {}", batch_size_));
  if (num_workers_ < 0) bad(fmt::format("num_workers must be >= 0, got {}", num_workers_));
  if (prefetch_factor_ < 1)
    bad(fmt::format("prefetch_factor must be >= 1, got {}", prefetch_factor_));
  if (!(timeout_ >= 0.0)) bad(fmt::format("timeout must be >= 0 seconds, got {}", timeout_));
  if (!(stall_warning_s_ >= 0.0)) {
    bad(fmt::format("stall_warning_s must be >= 0 seconds, got {}", stall_warning_s_));
  }
  if (world_size_ < 1) bad(fmt::format("world_size must be >= 1, got {}", world_size_));
  if (rank_ < 0 || rank_ >= world_size_) {
    bad(fmt::format("rank must be in [0, {}) (world_size), got {}", world_size_, rank_));
  }
  if (sampler_ && shuffle_) bad("sampler is mutually exclusive with shuffle=true");
  if (sampler_ && world_size_ > 1) bad("sampler is mutually exclusive with world_size > 1");
  if (!device_.is_cpu() && !device_.is_cuda()) {
    bad(fmt::format("device must be cpu or cuda, got {}", device_.str()));
  }
}

DataLoader::DataLoader(DatasetPtr dataset, DataLoaderOptions options)
    : options_(std::move(options)), dataset_(std::move(dataset)) {
  options_.validate();
  if (!dataset_) throw ConfigError("DataLoader: dataset is null");
  const int64_t n = dataset_->size();
  if (n < 1)
    throw ConfigError(fmt::format("DataLoader: dataset is empty ({})", dataset_->describe()));
  const auto seed = static_cast<uint64_t>(options_.seed());
  if (options_.sampler()) {
    sampler_ = options_.sampler();
  } else if (options_.world_size() > 1) {
    sampler_ = std::make_shared<DistributedSampler>(n, options_.rank(), options_.world_size(),
                                                    options_.shuffle(), seed, options_.drop_last());
  } else if (options_.shuffle()) {
    sampler_ = std::make_shared<RandomSampler>(n, seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(n);
  }
  const int64_t samples = sampler_->size();
  const int64_t bs = options_.batch_size();
  batches_per_epoch_ = options_.drop_last() ? samples / bs : (samples + bs - 1) / bs;

  // The slot layout comes from sample 0, loaded here in the parent before any fork.
  Rng rng(mix_seed(seed, 0, 0));
  layout_ = std::make_unique<BatchLayout>(dataset_->get(0, rng), bs);
  const bool pin = options_.pin_memory() && options_.device().is_cuda();
  const int64_t slots = options_.num_workers() * options_.prefetch_factor() + kConsumerSlots;
  check_ring_fits(slots, layout_->slot_bytes());
  ring_ = std::make_unique<ShmRing>(slots, layout_->slot_bytes(), pin);
  log::debug("DataLoader: {}; {} batches/epoch of {}; {} workers; ring {} x {} bytes{}",
             dataset_->describe(), batches_per_epoch_, bs, options_.num_workers(), slots,
             layout_->slot_bytes(), pin ? " (pinned)" : "");
}

DataLoader::~DataLoader() {
  stop_workers();
}

bool DataLoader::pinned() const {
  return ring_->pinned();
}

std::vector<int64_t> DataLoader::checked_indices(int64_t epoch) const {
  std::vector<int64_t> indices = sampler_->indices(epoch);
  const int64_t n = dataset_->size();
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= n) {
      throw ConfigError(
          fmt::format("DataLoader: the sampler gave index {} at position {} of epoch "
                      "{}, outside the dataset's [0, {})",
                      indices[i], i, epoch, n));
    }
  }
  return indices;
}

void DataLoader::start_epoch(int64_t epoch, int64_t skip_batches) {
  if (failure_) std::rethrow_exception(failure_);
  if (epoch < 0)
    throw Error(fmt::format("DataLoader::start_epoch: epoch must be >= 0, got {}", epoch));
  if (skip_batches < 0 || skip_batches > batches_per_epoch_) {
    throw Error(fmt::format("DataLoader::start_epoch: skip_batches must be in [0, {}], got {}",
                            batches_per_epoch_, skip_batches));
  }
  // The lookahead was sent with generation_ + 1: one increment makes it current, two discard it.
  const bool adopt = ahead_sent_ > 0 && epoch_ >= 0 && epoch == epoch_ + 1 && skip_batches == 0;
  generation_ += adopt ? 1 : 2;
  // Discard the previous epoch: filled slots go back now, in-flight ones when they arrive.
  for (const auto& [batch, slot] : ready_) ring_->release(slot);
  ready_.clear();
  if (!options_.persistent_workers() && !in_flight_.empty()) stop_workers();

  if (adopt && !ahead_error_.empty()) {
    const std::string message = std::move(ahead_error_);
    ahead_error_.clear();
    fail(std::make_exception_ptr(WorkerError(message)));
    throw WorkerError(message);
  }
  ahead_error_.clear();
  if (adopt) {
    indices_ = std::move(ahead_indices_);
    ready_ = std::move(ahead_ready_);
    next_send_ = ahead_sent_;
  } else {
    for (const auto& [batch, slot] : ahead_ready_) ring_->release(slot);
    indices_ = checked_indices(epoch);
    next_send_ = skip_batches;
  }
  ahead_indices_.clear();
  ahead_ready_.clear();
  ahead_sent_ = 0;
  epoch_ = epoch;
  next_return_ = skip_batches;
  if (options_.num_workers() == 0 || next_return_ >= batches_per_epoch_) return;
  try {
    if (!pool_) {
      pool_ = std::make_unique<WorkerPool>(*dataset_, *layout_, *ring_,
                                           static_cast<uint64_t>(options_.seed()),
                                           options_.num_workers());
    }
    dispatch();  // workers start on the epoch while the caller does something else
  } catch (const WorkerError&) {
    fail(std::current_exception());
    throw;
  }
}

std::optional<Batch> DataLoader::next() {
  const auto t0 = Clock::now();
  if (failure_) std::rethrow_exception(failure_);
  if (epoch_ < 0) start_epoch(0);
  if (next_return_ >= batches_per_epoch_) {
    if (!options_.persistent_workers() && in_flight_.empty()) stop_workers();
    return std::nullopt;
  }
  Batch batch;
  try {
    batch = options_.num_workers() == 0 ? next_in_process() : next_from_workers();
  } catch (const SlotsExhausted&) {
    throw;
  } catch (const StopRequested&) {
    throw;  // nothing was lost: the batch is still in flight and the next call waits for it
  } catch (...) {
    fail(std::current_exception());  // loading failed: the loader is done
    throw;
  }
  ++next_return_;
  if (next_return_ == batches_per_epoch_ && !options_.persistent_workers()) stop_workers();
  stats_.last_wait_seconds = seconds_since(t0);
  stats_.wait_seconds += stats_.last_wait_seconds;
  ++stats_.batches_produced;
  return batch;
}

int64_t DataLoader::rows_of(int64_t batch) const {
  const auto total = static_cast<int64_t>(indices_.size());
  return std::min(options_.batch_size(), total - batch * options_.batch_size());
}

Batch DataLoader::hand_out(int64_t slot) {
  std::shared_ptr<void> lease = ring_->lease(slot);  // from here on the tensors own the slot
  return layout_->view(ring_->slot(slot), rows_of(next_return_), lease);
}

void DataLoader::check_ring_fits(int64_t slots, size_t slot_bytes) const {
  // The ring's shared memory is mapped lazily: a ring larger than the machine would not fail
  // here but later, as the workers fill it (SIGBUS or the OOM killer). Say so now, in numbers.
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = -1;
  while (meminfo >> key) {
    if (key == "MemAvailable:") {
      meminfo >> kib;
      break;
    }
    meminfo.ignore(256, '\n');
  }
  if (kib <= 0) return;  // unknown: nothing to compare with
  const double ring_gib = static_cast<double>(slot_bytes) * static_cast<double>(slots) / (1 << 30);
  const double available_gib = static_cast<double>(kib) / (1 << 20);
  if (ring_gib <= 0.9 * available_gib) return;
  throw ConfigError(
      "data.batch_size",
      fmt::format("{} is too large for this machine: the batch ring holds {} batches ({} workers "
                  "x prefetch_factor {} + {}) of {:.1f} MiB each, {:.1f} GiB, but {:.1f} GiB of "
                  "memory is available; lower data.batch_size, data.num_workers or "
                  "data.prefetch_factor",
                  options_.batch_size(), slots, options_.num_workers(), options_.prefetch_factor(),
                  kConsumerSlots, static_cast<double>(slot_bytes) / (1 << 20), ring_gib,
                  available_gib));
}

Batch DataLoader::next_in_process() {
  const std::optional<int64_t> slot = ring_->acquire();
  if (!slot) throw_slots_exhausted();
  std::shared_ptr<void> lease = ring_->lease(*slot);  // returns the slot if loading throws
  int64_t current = -1;
  const int64_t* first = indices_.data() + next_return_ * options_.batch_size();
  collate_into(*dataset_, *layout_, static_cast<uint64_t>(options_.seed()), epoch_, first,
               rows_of(next_return_), ring_->slot(*slot), &current);
  return layout_->view(ring_->slot(*slot), rows_of(next_return_), lease);
}

Batch DataLoader::next_from_workers() {
  const auto t0 = Clock::now();
  const double timeout = options_.timeout();
  int64_t stalls_reported = 0;
  for (;;) {
    dispatch();
    auto it = ready_.find(next_return_);
    if (it != ready_.end()) {
      const int64_t slot = it->second;
      ready_.erase(it);
      Batch batch = hand_out(slot);
      dispatch();
      return batch;
    }
    if (next_send_ == next_return_ && in_flight_.empty()) throw_slots_exhausted();
    int wait_ms = kPollMillis;
    if (timeout > 0.0) {
      const double left = timeout - seconds_since(t0);
      if (left <= 0.0) {
        int64_t worker = next_return_ % options_.num_workers();
        for (const auto& [seq, task] : in_flight_) {
          if (task.generation == generation_ && task.batch == next_return_) worker = task.worker;
        }
        throw WorkerError(
            fmt::format("no batch from worker {} within {} s (timeout) while "
                        "waiting for batch {} of epoch {}",
                        worker, timeout, next_return_, epoch_));
      }
      wait_ms = std::clamp(static_cast<int>(left * 1000.0) + 1, 1, kPollMillis);
    }
    if (options_.stop_requested() && options_.stop_requested()()) {
      throw StopRequested(fmt::format("stop requested while waiting for batch {} of epoch {}",
                                      next_return_, epoch_));
    }
    const double stall = options_.stall_warning_s();
    if (stall > 0.0 && seconds_since(t0) >= stall * static_cast<double>(stalls_reported + 1)) {
      ++stalls_reported;
      report_stall(seconds_since(t0));
    }
    if (std::optional<WorkerResult> result = pool_->poll(wait_ms)) handle_result(*result);
  }
}

void DataLoader::report_stall(double waited_s) const {
  for (const auto& [seq, task] : in_flight_) {
    if (task.generation != generation_ || task.batch != next_return_) continue;
    const pid_t pid = pool_->pid(task.worker);
    log::warn("data loader: waited {:.1f} s for batch {} of epoch {} from worker {} (pid {}, {})",
              waited_s, next_return_, epoch_, task.worker, pid, process_state(pid));
    return;
  }
  log::warn(
      "data loader: waited {:.1f} s for batch {} of epoch {}, not yet sent to a worker "
      "(every ring slot is held: {} in flight)",
      waited_s, next_return_, epoch_, in_flight_.size());
}

// Sends batches [sent, batches_per_epoch_) of `epoch`, round robin as PyTorch, while the worker
// has room (prefetch_factor) and the ring a free slot. True once every batch has been sent.
bool DataLoader::send_batches(int64_t& sent, int64_t epoch, const std::vector<int64_t>& indices,
                              int64_t generation) {
  const int64_t workers = options_.num_workers();
  for (; sent < batches_per_epoch_; ++sent) {
    const int64_t worker = sent % workers;
    if (pool_->outstanding(worker) >= options_.prefetch_factor()) return false;
    const std::optional<int64_t> slot = ring_->acquire();
    if (!slot) return false;
    WorkerTask task;
    task.seq = next_seq_++;
    task.slot = *slot;
    task.epoch = epoch;
    task.batch = sent;
    const auto first = indices.begin() + sent * options_.batch_size();
    task.indices.assign(first, first + rows_of(sent));
    in_flight_[task.seq] = InFlight{sent, *slot, worker, generation};
    pool_->send(worker, task);
  }
  return true;
}

void DataLoader::dispatch() {
  if (!send_batches(next_send_, epoch_, indices_, generation_)) return;
  if (!options_.persistent_workers()) return;
  // Every batch of this epoch is sent: keep the workers busy with the next epoch's first batches,
  // which start_epoch(epoch_ + 1) adopts. Sample order and augmentation are functions of (seed,
  // epoch, index), so they are the batches that epoch would load anyway.
  if (ahead_indices_.empty()) ahead_indices_ = checked_indices(epoch_ + 1);
  send_batches(ahead_sent_, epoch_ + 1, ahead_indices_, generation_ + 1);
}

void DataLoader::handle_result(const WorkerResult& result) {
  auto it = in_flight_.find(result.seq);
  if (it == in_flight_.end()) {
    throw WorkerError(
        fmt::format("data worker {} answered unknown task {}", result.worker, result.seq));
  }
  const InFlight task = it->second;
  in_flight_.erase(it);
  if (task.generation == generation_ + 1) {  // the next epoch's, sent ahead
    if (result.ok) {
      ahead_ready_[task.batch] = task.slot;
    } else {  // raised if that epoch is started, forgotten if it is not
      ring_->release(task.slot);
      if (ahead_error_.empty()) {
        ahead_error_ =
            fmt::format("data worker {} failed on sample {} (batch {} of epoch {}): {}",
                        result.worker, result.sample_index, task.batch, epoch_ + 1, result.message);
      }
    }
    return;
  }
  if (task.generation != generation_) {  // a discarded epoch's batch, errors included
    ring_->release(task.slot);
    return;
  }
  if (!result.ok) {
    ring_->release(task.slot);
    throw WorkerError(fmt::format("data worker {} failed on sample {} (batch {}): {}",
                                  result.worker, result.sample_index, task.batch, result.message));
  }
  ready_[task.batch] = task.slot;
}

void DataLoader::stop_workers() noexcept {
  if (pool_) {
    pool_->shutdown();  // after this no process writes into the ring
    pool_.reset();
  }
  for (const auto& [seq, task] : in_flight_) ring_->release(task.slot);
  in_flight_.clear();
}

void DataLoader::fail(std::exception_ptr error) noexcept {
  failure_ = error;
  stop_workers();
  for (const auto& [batch, slot] : ready_) ring_->release(slot);
  ready_.clear();
  for (const auto& [batch, slot] : ahead_ready_) ring_->release(slot);
  ahead_ready_.clear();
}

void DataLoader::throw_slots_exhausted() const {
  throw SlotsExhausted(fmt::format(
      "DataLoader: all {} batch slots are held by the caller (tensors of earlier batches are "
      "still alive); keep at most {} batches at once, or copy what you keep (.clone())",
      ring_->num_slots(), kConsumerSlots));
}

}  // namespace brrr
