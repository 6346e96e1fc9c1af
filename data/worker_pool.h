#pragma once
// WorkerPool: the data-loader worker processes and the pipe protocol to them.
//
// Each worker is a fork()ed child with one AF_UNIX stream socket pair to the parent (a
// bidirectional pipe: tasks go down, results come up). A task names a batch (seq, slot, epoch,
// batch index, sample indices); the worker loads the samples with collate_into() straight into
// the shared ring slot and answers (seq, slot, ok/error, worker id, failing sample index,
// message). A worker handles its tasks in FIFO order.
//
// Child-process invariants: it sets PR_SET_PDEATHSIG(SIGKILL) and checks getppid() (dies with its
// parent, or precisely with the parent *thread* that forked it), ignores SIGINT (the parent shuts
// it down), runs ATen with one thread, touches no CUDA, closes every parent-side socket it
// inherited (so EOF reaches the right worker) and always leaves through _exit(), never returning
// into the caller's code (gtest, main). A closed task socket means "exit now".
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "data/collate.h"
#include "data/dataset.h"
#include "data/shm_ring.h"

namespace brrr {

/// One batch to load.
struct WorkerTask {
  int64_t seq = 0;    // loader-wide sequence number
  int64_t slot = 0;   // ring slot to fill
  int64_t epoch = 0;  // seeds the per-sample Rng
  int64_t batch = 0;  // batch index within the epoch (for messages)
  std::vector<int64_t> indices;
};

/// A worker's answer to one task.
struct WorkerResult {
  int64_t seq = 0;
  int64_t slot = 0;
  bool ok = true;
  int64_t worker = 0;
  int64_t sample_index = -1;  // the failing sample when !ok
  std::string message;        // what() of the worker's exception when !ok
};

class WorkerPool {
 public:
  /// Seconds a closing worker gets to exit by itself before it is SIGKILLed.
  static constexpr double kShutdownGraceSeconds = 1.0;

  /// Forks `num_workers` (>= 1) workers that load from `dataset` into `ring` with `layout`.
  /// The referenced objects must outlive the pool (the children use their fork-time copies).
  WorkerPool(const Dataset& dataset, const BatchLayout& layout, const ShmRing& ring, uint64_t seed,
             int64_t num_workers);
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  /// shutdown(): no child process is left behind.
  ~WorkerPool();

  int64_t num_workers() const { return static_cast<int64_t>(workers_.size()); }
  pid_t pid(int64_t worker) const;
  /// Tasks sent to `worker` and not answered yet.
  int64_t outstanding(int64_t worker) const;

  /// Queues `task` on `worker`. Throws WorkerError if the worker is gone.
  void send(int64_t worker, const WorkerTask& task);

  /// Waits up to `timeout_ms` for one result (nullopt if none came). Detects dead workers
  /// (EOF on their socket, or waitpid) and throws WorkerError: "data worker 1 (pid N) was killed
  /// by signal 9 (SIGKILL) while loading batch 17".
  std::optional<WorkerResult> poll(int timeout_ms);

  /// Closes the task sockets (workers exit), waits kShutdownGraceSeconds, then SIGKILLs and reaps
  /// what is left. Idempotent, never throws.
  void shutdown() noexcept;

 private:
  struct Worker {
    pid_t pid = -1;
    bool reaped = false;  // waitpid() collected `status`; the pid may be reused by now
    int status = 0;
    int fd = -1;  // parent end of the socket pair; -1 once closed
    std::deque<std::pair<int64_t, int64_t>> pending;  // (seq, batch) sent, not answered, FIFO
  };

  void spawn(int64_t id, const Dataset& dataset, const BatchLayout& layout, const ShmRing& ring,
             uint64_t seed);
  WorkerResult read_result(int64_t id);
  [[noreturn]] void report_death(int64_t id);
  void check_alive();

  std::vector<Worker> workers_;
};

}  // namespace brrr
