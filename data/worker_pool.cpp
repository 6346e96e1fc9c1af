#include "data/worker_pool.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/log.h"

namespace brrr {
namespace {

// Wire format (host byte order: both ends are the same binary on the same machine).
struct TaskHeader {
  int64_t seq, slot, epoch, batch, count;  // followed by `count` int64 sample indices
};
struct ResultHeader {
  int64_t seq, slot, ok, worker, sample_index, message_bytes;  // followed by the message
};
constexpr size_t kMaxMessageBytes = 4000;

// Parent-side socket ends of every live worker of every pool in this process. A child closes all
// of them, so that a parent closing worker k's socket really gives worker k EOF.
std::mutex g_parent_fds_mu;
std::vector<int> g_parent_fds;

bool send_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);  // EPIPE instead of SIGPIPE
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

// False on EOF or error before `bytes` arrived.
bool recv_all(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : "unknown signal";
}

// SIGINT and SIGTERM: blocked across fork() until the child has set its own dispositions.
sigset_t startup_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// The body of a worker process. Never returns.
[[noreturn]] void worker_main(int64_t id, int fd, pid_t parent, const std::vector<int>& close_fds,
                              const Dataset& dataset, const BatchLayout& layout, char* ring_base,
                              size_t slot_bytes, uint64_t seed) {
  // Die with the parent; if it already died between fork() and prctl(), leave now.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(1);
  signal(SIGINT, SIG_IGN);   // Ctrl-C goes to the whole process group: the parent decides.
  signal(SIGTERM, SIG_DFL);  // the parent's handler (a flag it polls) means nothing here
  signal(SIGPIPE, SIG_IGN);
  // fork() ran with SIGINT and SIGTERM blocked (see start_worker): a Ctrl-C that arrived before
  // the lines above is discarded now instead of killing the worker with the parent's disposition.
  const sigset_t startup = startup_signals();
  pthread_sigmask(SIG_UNBLOCK, &startup, nullptr);
  for (int other : close_fds) close(other);
  try {
    at::set_num_threads(1);  // before any ATen op: the parent's thread pool did not survive fork
    std::vector<int64_t> indices;
    std::string buffer;
    for (;;) {
      TaskHeader task{};
      if (!recv_all(fd, &task, sizeof task)) break;  // parent closed the socket: exit
      indices.resize(static_cast<size_t>(task.count));
      if (!recv_all(fd, indices.data(), indices.size() * sizeof(int64_t))) break;
      ResultHeader result{task.seq, task.slot, 1, id, -1, 0};
      std::string message;
      int64_t current = -1;
      try {
        collate_into(dataset, layout, seed, task.epoch, indices.data(), task.count,
                     ring_base + slot_bytes * static_cast<size_t>(task.slot), &current);
      } catch (const std::exception& e) {
        result.ok = 0;
        result.sample_index = current;
        message = e.what();
      } catch (...) {
        result.ok = 0;
        result.sample_index = current;
        message = "unknown exception (not derived from std::exception)";
      }
      if (message.size() > kMaxMessageBytes) message.resize(kMaxMessageBytes);
      result.message_bytes = static_cast<int64_t>(message.size());
      buffer.assign(reinterpret_cast<const char*>(&result), sizeof result);
      buffer += message;
      if (!send_all(fd, buffer.data(), buffer.size())) break;  // parent gone or closing
    }
  } catch (...) {
    _exit(2);
  }
  _exit(0);
}

}  // namespace

WorkerPool::WorkerPool(const Dataset& dataset, const BatchLayout& layout, const ShmRing& ring,
                       uint64_t seed, int64_t num_workers) {
  if (num_workers < 1) {
    throw ConfigError(fmt::format("WorkerPool: num_workers must be >= 1, got {}", num_workers));
  }
  workers_.resize(static_cast<size_t>(num_workers));
  try {
    for (int64_t id = 0; id < num_workers; ++id) spawn(id, dataset, layout, ring, seed);
  } catch (...) {
    shutdown();
    throw;
  }
}

WorkerPool::~WorkerPool() {
  shutdown();
}

void WorkerPool::spawn(int64_t id, const Dataset& dataset, const BatchLayout& layout,
                       const ShmRing& ring, uint64_t seed) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw WorkerError(
        fmt::format("data worker {}: socketpair failed: {}", id, std::strerror(errno)));
  }
  const pid_t parent = getpid();
  char* ring_base = static_cast<char*>(ring.slot(0));
  // Hold the registry lock across fork so the child's copy of the list is complete.
  std::unique_lock<std::mutex> lock(g_parent_fds_mu);
  std::vector<int> close_fds = g_parent_fds;
  close_fds.push_back(fds[0]);
  // The child starts with SIGINT and SIGTERM blocked until it has set its own dispositions.
  const sigset_t startup = startup_signals();
  sigset_t previous;
  pthread_sigmask(SIG_BLOCK, &startup, &previous);
  const pid_t pid = fork();
  if (pid == 0) {
    worker_main(id, fds[1], parent, close_fds, dataset, layout, ring_base, ring.slot_bytes(), seed);
  }
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    throw WorkerError(
        fmt::format("data worker {}: fork failed: {}", id, std::strerror(fork_errno)));
  }
  g_parent_fds.push_back(fds[0]);
  lock.unlock();
  workers_[static_cast<size_t>(id)].pid = pid;
  workers_[static_cast<size_t>(id)].fd = fds[0];
}

pid_t WorkerPool::pid(int64_t worker) const {
  return workers_.at(static_cast<size_t>(worker)).pid;
}

int64_t WorkerPool::outstanding(int64_t worker) const {
  return static_cast<int64_t>(workers_.at(static_cast<size_t>(worker)).pending.size());
}

void WorkerPool::send(int64_t worker, const WorkerTask& task) {
  Worker& w = workers_.at(static_cast<size_t>(worker));
  if (w.fd < 0) throw WorkerError(fmt::format("data worker {} is shut down", worker));
  std::string buffer(sizeof(TaskHeader) + task.indices.size() * sizeof(int64_t), '\0');
  const TaskHeader header{task.seq, task.slot, task.epoch, task.batch,
                          static_cast<int64_t>(task.indices.size())};
  std::memcpy(buffer.data(), &header, sizeof header);
  std::memcpy(buffer.data() + sizeof header, task.indices.data(),
              task.indices.size() * sizeof(int64_t));
  w.pending.emplace_back(task.seq, task.batch);
  if (!send_all(w.fd, buffer.data(), buffer.size())) report_death(worker);
}

std::optional<WorkerResult> WorkerPool::poll(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i].fd < 0) continue;
    fds.push_back({workers_[i].fd, POLLIN, 0});
    ids.push_back(static_cast<int64_t>(i));
  }
  int ready = ::poll(fds.data(), fds.size(), timeout_ms);
  if (ready < 0 && errno != EINTR) {
    throw WorkerError(fmt::format("poll on the data workers failed: {}", std::strerror(errno)));
  }
  for (size_t i = 0; ready > 0 && i < fds.size(); ++i) {
    // POLLHUP with data still buffered reads the data first; EOF is seen by read_result.
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) return read_result(ids[i]);
  }
  check_alive();
  return std::nullopt;
}

WorkerResult WorkerPool::read_result(int64_t id) {
  Worker& w = workers_[static_cast<size_t>(id)];
  ResultHeader header{};
  if (!recv_all(w.fd, &header, sizeof header)) report_death(id);
  if (header.message_bytes < 0 || static_cast<size_t>(header.message_bytes) > kMaxMessageBytes) {
    throw WorkerError(fmt::format("data worker {} sent a malformed result (message of {} bytes)",
                                  id, header.message_bytes));
  }
  WorkerResult result;
  result.message.resize(static_cast<size_t>(header.message_bytes));
  if (!recv_all(w.fd, result.message.data(), result.message.size())) report_death(id);
  if (w.pending.empty() || w.pending.front().first != header.seq) {
    throw WorkerError(fmt::format("data worker {} answered task {} out of order", id, header.seq));
  }
  w.pending.pop_front();
  result.seq = header.seq;
  result.slot = header.slot;
  result.ok = header.ok != 0;
  result.worker = header.worker;
  result.sample_index = header.sample_index;
  return result;
}

void WorkerPool::check_alive() {
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    if (w.pid > 0 && !w.reaped && waitpid(w.pid, &w.status, WNOHANG) == w.pid) {
      w.reaped = true;
      report_death(static_cast<int64_t>(i));
    }
  }
}

void WorkerPool::report_death(int64_t id) {
  Worker& w = workers_[static_cast<size_t>(id)];
  if (w.pid > 0 && !w.reaped) {
    // EOF on the socket: the process is exiting; give it a moment to become reapable.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (!w.reaped && std::chrono::steady_clock::now() < deadline) {
      w.reaped = waitpid(w.pid, &w.status, WNOHANG) == w.pid;
      if (!w.reaped) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  std::string what = "closed its connection unexpectedly";
  if (w.reaped && WIFSIGNALED(w.status)) {
    what = fmt::format("was killed by signal {} ({})", WTERMSIG(w.status),
                       signal_name(WTERMSIG(w.status)));
  } else if (w.reaped && WIFEXITED(w.status)) {
    what = fmt::format("exited unexpectedly with status {}", WEXITSTATUS(w.status));
  }
  const std::string doing = w.pending.empty()
                                ? "while idle"
                                : fmt::format("while loading batch {}", w.pending.front().second);
  throw WorkerError(fmt::format("data worker {} (pid {}) {} {}", id, w.pid, what, doing));
}

void WorkerPool::shutdown() noexcept {
  {
    std::lock_guard<std::mutex> lock(g_parent_fds_mu);
    for (Worker& w : workers_) {
      if (w.fd < 0) continue;
      g_parent_fds.erase(std::remove(g_parent_fds.begin(), g_parent_fds.end(), w.fd),
                         g_parent_fds.end());
      close(w.fd);  // the worker sees EOF (or EPIPE on its next result) and _exits
      w.fd = -1;
      w.pending.clear();
    }
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(kShutdownGraceSeconds);
  for (;;) {
    bool alive = false;
    for (Worker& w : workers_) {
      if (w.pid > 0 && !w.reaped) w.reaped = waitpid(w.pid, &w.status, WNOHANG) == w.pid;
      alive = alive || (w.pid > 0 && !w.reaped);
    }
    if (!alive) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (Worker& w : workers_) {
    if (w.pid <= 0 || w.reaped) continue;
    log::warn("data worker (pid {}) did not exit within {} s; killing it", w.pid,
              kShutdownGraceSeconds);
    kill(w.pid, SIGKILL);
    while (waitpid(w.pid, &w.status, 0) < 0 && errno == EINTR) {
    }
    w.reaped = true;
  }
}

}  // namespace brrr
