#include "trainer/dist/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/log.h"

extern char** environ;

namespace brrr {

namespace {

volatile std::sig_atomic_t g_signal = 0;    // the latest SIGINT/SIGTERM/SIGHUP received
volatile std::sig_atomic_t g_received = 0;  // how many were received

void on_signal(int sig) {
  g_signal = sig;
  g_received = g_received + 1;
}

// The launcher's handlers for the life of a launch; the previous ones come back after it.
class ForwardedSignals {
 public:
  ForwardedSignals() {
    g_signal = 0;
    g_received = 0;
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: poll() returns at once with EINTR
    for (int i = 0; i < kCount; ++i) sigaction(kSignals[i], &action, &previous_[i]);
  }
  ~ForwardedSignals() {
    for (int i = 0; i < kCount; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  }
  ForwardedSignals(const ForwardedSignals&) = delete;
  ForwardedSignals& operator=(const ForwardedSignals&) = delete;

 private:
  static constexpr int kCount = 3;
  static constexpr int kSignals[kCount] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction previous_[kCount] {};
};

int free_port(const std::string& addr) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(fmt::format("launcher: socket(): {}", std::strerror(errno)));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) sa.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof sa;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    throw Error(fmt::format("launcher: no free port on {}: {}", addr, why));
  }
  close(fd);
  return ntohs(sa.sin_port);
}

std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  }
  return "ended";
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the launcher's own output is gone: nothing to tell
    done += static_cast<size_t>(n);
  }
}

// One output stream of one rank: a pipe read into whole, prefixed lines.
struct Stream {
  int fd = -1;
  int target = 1;  // the launcher's stdout or stderr
  std::string pending;

  void pump(const std::string& prefix) {
    char chunk[1 << 16];
    const ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n > 0) {
      pending.append(chunk, static_cast<size_t>(n));
      std::string lines;
      size_t start = 0;
      for (size_t end; (end = pending.find('\n', start)) != std::string::npos; start = end + 1) {
        lines += prefix;
        lines.append(pending, start, end + 1 - start);
      }
      pending.erase(0, start);
      write_all(target, lines);
      return;
    }
    if (!pending.empty()) write_all(target, prefix + pending + "\n");  // a last, unended line
    pending.clear();
    close(fd);
    fd = -1;
  }
};

struct Rank {
  int64_t index = 0;
  pid_t pid = -1;
  Stream out, err;
  std::optional<int> status;  // once ended
};

std::vector<std::string> rank_environment(const LaunchOptions& o, int64_t rank, int port) {
  static const std::set<std::string> kOwn = {"RANK",
                                             "WORLD_SIZE",
                                             "LOCAL_RANK",
                                             "LOCAL_WORLD_SIZE",
                                             "MASTER_ADDR",
                                             "MASTER_PORT",
                                             "TORCHELASTIC_USE_AGENT_STORE"};
  std::vector<std::string> env;
  bool has_threads = false;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (kOwn.count(name)) continue;
    if (name == "OMP_NUM_THREADS") has_threads = true;
    env.push_back(entry);
  }
  env.push_back(fmt::format("RANK={}", rank));
  env.push_back(fmt::format("WORLD_SIZE={}", o.nproc));
  env.push_back(fmt::format("LOCAL_RANK={}", rank));
  env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", o.nproc));
  env.push_back(fmt::format("MASTER_ADDR={}", o.master_addr));
  env.push_back(fmt::format("MASTER_PORT={}", port));
  if (!has_threads) {
    // The ranks share this machine's cores (as torchrun, which sets 1): an equal part each.
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const int64_t cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    env.push_back(fmt::format("OMP_NUM_THREADS={}", std::max<int64_t>(1, cores / o.nproc)));
  }
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void start_rank(const LaunchOptions& o, const std::string& program, int port, Rank& rank) {
  std::vector<std::string> argv_s = {program};
  argv_s.insert(argv_s.end(), o.args.begin(), o.args.end());
  std::vector<std::string> env_s = rank_environment(o, rank.index, port);
  std::vector<char*> argv = pointers(argv_s);
  std::vector<char*> envp = pointers(env_s);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    throw Error(fmt::format("launcher: pipe(): {}", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw Error(fmt::format("launcher: fork(): {}", std::strerror(errno)));
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    setpgid(0, 0);                     // terminal signals reach the rank through the launcher
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // and it never outlives the launcher
    if (getppid() != parent) _exit(127);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argv[0], argv.data(), envp.data());
    for (const char* part : {"cannot run ", static_cast<const char*>(argv[0]), ": ",
                             static_cast<const char*>(strerror(errno)), "\n"}) {
      const ssize_t n = write(STDERR_FILENO, part, strlen(part));
      (void)n;  // nowhere to report a failed report
    }
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  rank.pid = pid;
  rank.out = Stream{out[0], STDOUT_FILENO, {}};
  rank.err = Stream{err[0], STDERR_FILENO, {}};
}

}  // namespace

int launch_local_ranks(const LaunchOptions& o) {
  if (o.nproc < 1) {
    throw UsageError(fmt::format("--nproc-per-node needs a number of ranks >= 1, got {}", o.nproc));
  }
  const std::string program = o.program.empty() ? "/proc/self/exe" : o.program;
  const int port = o.master_port > 0 ? static_cast<int>(o.master_port) : free_port(o.master_addr);
  ForwardedSignals signals;
  std::vector<Rank> ranks(static_cast<size_t>(o.nproc));
  for (int64_t r = 0; r < o.nproc; ++r) {
    ranks[static_cast<size_t>(r)].index = r;
    try {
      start_rank(o, program, port, ranks[static_cast<size_t>(r)]);
    } catch (...) {
      for (auto& started : ranks) {
        if (started.pid > 0) kill(started.pid, SIGKILL);
      }
      for (auto& started : ranks) {
        if (started.pid > 0) waitpid(started.pid, nullptr, 0);
      }
      throw;
    }
  }
  log::info("launcher: {} ranks on {}:{}", o.nproc, o.master_addr, port);

  using Clock = std::chrono::steady_clock;
  std::optional<int64_t> first_failed;
  bool kill_pending = false;  // SIGKILL the ranks still running at kill_at
  Clock::time_point kill_at{};
  std::sig_atomic_t forwarded = 0;
  int forwarded_signal = 0;
  auto live = [&] {
    int64_t n = 0;
    for (const auto& r : ranks) n += r.status ? 0 : 1;
    return n;
  };
  auto open_streams = [&] {
    int64_t n = 0;
    for (const auto& r : ranks) n += (r.out.fd >= 0) + (r.err.fd >= 0);
    return n;
  };
  // Output still open after every rank ended belongs to a process a rank left behind (which
  // inherited its pipe); it gets a moment to drain, then the launcher stops reading.
  constexpr auto kDrain = std::chrono::seconds(2);
  std::optional<Clock::time_point> all_ended;
  while (live() > 0 || open_streams() > 0) {
    if (live() == 0) {
      if (!all_ended) all_ended = Clock::now();
      if (Clock::now() - *all_ended > kDrain) break;
    }
    // Forward every signal received, once, to the ranks still running.
    if (g_received != forwarded) {
      forwarded = g_received;
      forwarded_signal = g_signal;
      for (const auto& r : ranks) {
        if (!r.status) kill(r.pid, forwarded_signal);
      }
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, Stream*>> owners;
    for (auto& r : ranks) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd < 0) continue;
        fds.push_back(pollfd{s->fd, POLLIN, 0});
        owners.emplace_back(&r, s);
      }
    }
    if (!fds.empty()) {
      if (poll(fds.data(), fds.size(), 100) > 0) {
        for (size_t i = 0; i < fds.size(); ++i) {
          if (fds[i].revents != 0)
            owners[i].second->pump(fmt::format("[rank {}] ", owners[i].first->index));
        }
      }
    } else {
      usleep(20000);
    }
    int status = 0;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
      for (auto& r : ranks) {
        if (r.pid != pid) continue;
        r.status = status;
        const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (failed && !first_failed && forwarded == 0) {
          first_failed = r.index;
          log::error("launcher: rank {} {}; stopping the other ranks", r.index, describe(status));
          for (const auto& other : ranks) {
            if (!other.status) kill(other.pid, SIGTERM);
          }
          kill_pending = true;
          kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(o.grace_s));
        }
      }
    }
    if (kill_pending && Clock::now() >= kill_at) {
      for (const auto& r : ranks) {
        if (!r.status) kill(r.pid, SIGKILL);
      }
      kill_pending = false;
    }
  }

  if (first_failed) {
    const Rank& cause = ranks[static_cast<size_t>(*first_failed)];
    std::string others;
    for (const auto& r : ranks) {
      if (r.index != cause.index)
        others += fmt::format("; rank {} {}", r.index, describe(*r.status));
    }
    log::error("launcher: the run failed: rank {} {} first{}", cause.index, describe(*cause.status),
               others);
    return exit_code_of(*cause.status);
  }
  int code = 0;
  for (const auto& r : ranks) code = std::max(code, exit_code_of(*r.status));
  if (forwarded_signal != 0) {
    log::warn("launcher: signal {} forwarded to the {} ranks; they ended with code {}",
              forwarded_signal, o.nproc, code);
  }
  return code;
}

}  // namespace brrr
