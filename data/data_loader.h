#pragma once
// DataLoader: batches of a Dataset, loaded by forked worker processes (or in this process when
// num_workers = 0) into a shared-memory slot ring and handed out strictly in order.
//
// Invariants:
//  * Batch b of epoch e holds samples sampler.indices(e)[b*B, (b+1)*B), sample i drawn with
//    Rng(mix_seed(seed, e, i)); nothing depends on num_workers, so any worker count gives
//    bit-identical batches in the same order.
//  * Returned tensors are views of a ring slot; the slot is reused only after every tensor of the
//    batch is freed. Keep at most kConsumerSlots batches alive at once, or next() throws.
//  * After a worker failure the loader is unusable: every later call rethrows the same error, and
//    no worker process is left. The destructor leaves no child process and no shared-memory name.
//  * Not thread-safe: one thread drives a loader (tensor deleters may run on any thread), and that
//    thread must outlive the workers (they die with the thread that forked them, PR_SET_PDEATHSIG).
#include <c10/core/Device.h>
#include <torch/arg.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/collate.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace brrr {

class ShmRing;
class WorkerPool;
struct WorkerResult;

/// Options of a DataLoader; names and meanings follow torch.utils.data.DataLoader.
/// `DataLoaderOptions().batch_size(64).num_workers(4).shuffle(true)`.
struct DataLoaderOptions {
  /// Throws ConfigError naming the field and its value on the first invalid one.
  void validate() const;

  /// Samples per batch (>= 1).
  TORCH_ARG(int64_t, batch_size) = 1;
  /// Reshuffle every epoch from (seed, epoch). Mutually exclusive with a custom sampler.
  TORCH_ARG(bool, shuffle) = false;
  /// Worker processes; 0 loads in the calling process through the same collate path.
  TORCH_ARG(int64_t, num_workers) = 0;
  /// Page-lock the batch ring (only takes effect with a CUDA device).
  TORCH_ARG(bool, pin_memory) = false;
  /// Batches in flight per worker (>= 1).
  TORCH_ARG(int64_t, prefetch_factor) = 2;
  /// Keep the workers across epochs; otherwise they are forked per epoch and ended at its end.
  TORCH_ARG(bool, persistent_workers) = false;
  /// Drop the last incomplete batch (otherwise it is returned with fewer rows).
  TORCH_ARG(bool, drop_last) = false;
  /// Seconds to wait for one batch before failing; 0 waits forever (dead workers still detected).
  TORCH_ARG(double, timeout) = 0.0;
  /// Custom index order; null = sequential / random / distributed from the fields here.
  TORCH_ARG(SamplerPtr, sampler) = nullptr;
  /// Seed of the sample order and of every sample's Rng.
  TORCH_ARG(int64_t, seed) = 0;
  /// This process's rank and the number of ranks; world_size > 1 shards with DistributedSampler.
  TORCH_ARG(int64_t, rank) = 0;
  TORCH_ARG(int64_t, world_size) = 1;
  /// Where batches are going: CPU or CUDA. The ring is pinned only for CUDA with pin_memory.
  TORCH_ARG(c10::Device, device) = c10::Device(c10::kCPU);
  /// Asked about every 100 ms while waiting for workers; when it answers true the wait ends with
  /// StopRequested (the loader stays usable). Null: never.
  TORCH_ARG(std::function<bool()>, stop_requested) = nullptr;
  /// A wait for one batch longer than this many seconds logs which batch and which worker (pid
  /// and process state, e.g. stopped) it waits for, again after every further interval; 0 = off.
  TORCH_ARG(double, stall_warning_s) = 30.0;
};

/// Counters for the trainer's data-wait metrics.
struct DataLoaderStats {
  /// Batches handed out by next() since construction.
  int64_t batches_produced = 0;
  /// Host seconds spent inside next() (waiting for workers, or loading when num_workers = 0).
  double wait_seconds = 0.0;
  /// Host seconds of the latest next().
  double last_wait_seconds = 0.0;
};

class DataLoader {
 public:
  /// Ring slots beyond num_workers * prefetch_factor, for batches the consumer (and a Prefetcher)
  /// still holds.
  static constexpr int64_t kConsumerSlots = 4;

  /// Validates `options`, builds the slot layout from dataset->get(0) and the ring (page-locked
  /// when options.pin_memory and a CUDA device). Workers are forked by the first start_epoch().
  DataLoader(DatasetPtr dataset, DataLoaderOptions options);
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;
  /// Ends every worker (discarding in-flight batches); batches still held stay valid.
  ~DataLoader();

  /// Begins epoch `epoch` at batch `skip_batches` (the skipped batches are not loaded), discarding
  /// whatever of the previous epoch is still in flight. With persistent workers, once every batch
  /// of an epoch has been sent the workers go on with the first batches of the next one, and
  /// start_epoch(epoch + 1) keeps them: no stall at the epoch boundary. Any other start discards
  /// them.
  void start_epoch(int64_t epoch, int64_t skip_batches = 0);
  /// The next batch of the epoch, or nullopt at its end (and on every later call until the next
  /// start_epoch()). Starts epoch 0 if no epoch was started. Throws WorkerError on worker failure.
  std::optional<Batch> next();

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  /// The current epoch (-1 before the first start_epoch()).
  int64_t epoch() const { return epoch_; }
  /// Batches of the current epoch handed out so far, skipped ones included (the resume position).
  int64_t batches_consumed() const { return next_return_; }

  const DataLoaderOptions& options() const { return options_; }
  const BatchLayout& layout() const { return *layout_; }
  /// Whether the batch ring is page-locked (batches report is_pinned()).
  bool pinned() const;
  /// Batches of the next epoch already sent to workers (the epoch-boundary lookahead).
  int64_t batches_ahead() const { return ahead_sent_; }
  DataLoaderStats stats() const { return stats_; }

 private:
  struct InFlight {
    int64_t batch;
    int64_t slot;
    int64_t worker;
    int64_t generation;  // start_epoch() count when sent; older = discarded, +1 = next epoch
  };

  Batch next_in_process();
  Batch next_from_workers();
  void dispatch();
  std::vector<int64_t> checked_indices(int64_t epoch) const;
  bool send_batches(int64_t& sent, int64_t epoch, const std::vector<int64_t>& indices,
                    int64_t generation);
  void handle_result(const WorkerResult& result);
  Batch hand_out(int64_t slot);
  int64_t rows_of(int64_t batch) const;
  void stop_workers() noexcept;
  void report_stall(double waited_s) const;
  /// ConfigError keyed data.batch_size when the ring would not fit in the available memory.
  void check_ring_fits(int64_t slots, size_t slot_bytes) const;
  void fail(std::exception_ptr error) noexcept;
  [[noreturn]] void throw_slots_exhausted() const;

  DataLoaderOptions options_;
  DatasetPtr dataset_;
  SamplerPtr sampler_;
  std::unique_ptr<BatchLayout> layout_;
  std::unique_ptr<ShmRing> ring_;
  std::unique_ptr<WorkerPool> pool_;  // null when num_workers = 0 or between epochs

  int64_t batches_per_epoch_ = 0;
  int64_t epoch_ = -1;
  std::vector<int64_t> indices_;  // this epoch's sample order
  int64_t next_send_ = 0;         // next batch to give to a worker
  int64_t next_return_ = 0;       // next batch to hand out
  int64_t generation_ = 0;
  int64_t next_seq_ = 0;
  std::map<int64_t, InFlight> in_flight_;  // seq -> task sent, not answered
  std::map<int64_t, int64_t> ready_;       // batch -> filled slot, waiting for its turn
  // Lookahead into epoch_ + 1 (persistent workers): its order, batches sent, batches filled.
  std::vector<int64_t> ahead_indices_;
  int64_t ahead_sent_ = 0;
  std::map<int64_t, int64_t> ahead_ready_;
  std::string ahead_error_;  // a worker failed on a lookahead batch
  std::exception_ptr failure_;
  DataLoaderStats stats_;
};

}  // namespace brrr
