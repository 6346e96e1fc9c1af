// The distributed launch: torchrun's environment read with every error naming the variable, and
// real c10d process groups (Gloo, in forked CPU processes) joined through a TCPStore.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "core/error.h"
#include "trainer/dist/dist_context.h"
#include "trainer/dist/dist_env.h"
#include "trainer/dist/grad_sync.h"
#include "trainer/dist/process_group.h"

namespace brrr {
namespace {

std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string env_error(const std::map<std::string, std::string>& vars) {
  try {
    read_dist_env(env_of(vars));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

const std::map<std::string, std::string> kTorchrun = {{"RANK", "1"},
                                                      {"WORLD_SIZE", "4"},
                                                      {"LOCAL_RANK", "1"},
                                                      {"LOCAL_WORLD_SIZE", "2"},
                                                      {"MASTER_ADDR", "10.0.0.1"},
                                                      {"MASTER_PORT", "29500"}};

std::map<std::string, std::string> with(std::map<std::string, std::string> vars,
                                        const std::string& name, const char* value) {
  if (value == nullptr) {
    vars.erase(name);
  } else {
    vars[name] = value;
  }
  return vars;
}

TEST(DistEnvTest, ReadsTorchrunsVariables) {
  EXPECT_FALSE(read_dist_env(env_of({})).has_value());  // not launched distributed
  const DistEnv env = *read_dist_env(env_of(kTorchrun));
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_FALSE(env.agent_store);
  EXPECT_TRUE(
      read_dist_env(env_of(with(kTorchrun, "TORCHELASTIC_USE_AGENT_STORE", "True")))->agent_store);
  // One machine without the LOCAL_* pair: they are RANK and WORLD_SIZE.
  const DistEnv single = *read_dist_env(
      env_of(with(with(kTorchrun, "LOCAL_RANK", nullptr), "LOCAL_WORLD_SIZE", nullptr)));
  EXPECT_EQ(single.local_rank, 1);
  EXPECT_EQ(single.local_world_size, 4);
}

TEST(DistEnvTest, AnIncompleteOrInconsistentEnvironmentNamesTheVariable) {
  EXPECT_EQ(env_error(with(kTorchrun, "MASTER_PORT", nullptr)),
            "distributed launch: MASTER_PORT is not set (torchrun sets RANK, WORLD_SIZE, "
            "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; RANK is)");
  EXPECT_EQ(env_error(with(kTorchrun, "RANK", "4")),
            "distributed launch: RANK=4 is not in [0, WORLD_SIZE=4)");
  EXPECT_EQ(env_error(with(kTorchrun, "RANK", nullptr)).substr(0, 41),
            "distributed launch: RANK is not set (torc");
  EXPECT_EQ(env_error(with(kTorchrun, "WORLD_SIZE", "four")),
            "distributed launch: WORLD_SIZE='four' is not an integer");
  EXPECT_EQ(env_error(with(kTorchrun, "MASTER_PORT", "70000")),
            "distributed launch: MASTER_PORT=70000 is not a port (1..65535)");
  EXPECT_EQ(env_error(with(kTorchrun, "LOCAL_WORLD_SIZE", nullptr)),
            "distributed launch: LOCAL_RANK is set but LOCAL_WORLD_SIZE is not");
  EXPECT_EQ(env_error(with(kTorchrun, "LOCAL_RANK", "2")),
            "distributed launch: LOCAL_RANK=2 is not in [0, LOCAL_WORLD_SIZE=2)");
  EXPECT_EQ(env_error(with(kTorchrun, "LOCAL_WORLD_SIZE", "5")),
            "distributed launch: LOCAL_WORLD_SIZE=5 is not in [1, WORLD_SIZE=4]");
}

// A TCP port nobody listens on now (the kernel's choice; released before use).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Runs `body(rank)` in `world` forked processes and returns their exit codes (each rank exits 0
// when its checks hold); a rank still running after 60 s is killed (exit code -1).
//
// The ranks are forked without exec, so each inherits this process's OpenMP state but not its
// threads: once an earlier test in this process ran a parallel region (GraphPolicyTest does),
// libgomp's pool on the main thread names workers that do not exist in the child, and the
// child's first parallel region (e.g. log_softmax in cross_entropy) waits for them forever. So
// every rank runs ATen single-threaded on its main thread (as PyTorch's DataLoader workers do).
std::vector<int> run_ranks(int world, const std::function<bool(const DistEnv&)>& body) {
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      at::set_num_threads(1);  // never enter the parent's OpenMP pool (see above)
      DistEnv env;
      env.rank = rank;
      env.world_size = world;
      env.local_rank = rank;
      env.local_world_size = world;
      env.master_addr = "127.0.0.1";
      env.master_port = port;
      bool ok = false;
      try {
        ok = body(env);
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", rank, e.what());
      }
      _exit(ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (const pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) != pid) {
      if (std::chrono::steady_clock::now() > deadline) {
        fprintf(stderr, "rank %d (pid %d) still running after 60 s: killed\n",
                static_cast<int>(codes.size()), static_cast<int>(pid));
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        status = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    codes.push_back(status == -1 ? -1 : (WIFEXITED(status) ? WEXITSTATUS(status) : 128));
  }
  return codes;
}

TEST(ProcessGroupTest, ThreeGlooRanksAllReduceAndBroadcast) {
  if (!gloo_available()) GTEST_SKIP() << "built without Gloo's headers";
  const auto codes = run_ranks(3, [](const DistEnv& env) {
    auto group = make_process_group(env, c10::Device(c10::kCPU), std::chrono::seconds(30));
    if (group->getRank() != env.rank || group->getSize() != 3) return false;
    // Sum of (rank + 1) * [1, 2, 3, 4] over ranks 0..2 = 6 * [1, 2, 3, 4].
    std::vector<at::Tensor> sum = {at::arange(1, 5, at::kFloat) * static_cast<float>(env.rank + 1)};
    group->allreduce(sum)->wait();
    if (!at::equal(sum[0], at::arange(1, 5, at::kFloat) * 6.0f)) return false;
    // Rank 0's tensor reaches every rank.
    std::vector<at::Tensor> from_zero = {at::full({3}, static_cast<double>(10 + env.rank))};
    c10d::BroadcastOptions options;
    options.rootRank = 0;
    group->broadcast(from_zero, options)->wait();
    return at::equal(from_zero[0], at::full({3}, 10.0));
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

TEST(ProcessGroupTest, ARankWhosePeersNeverComeFailsWithinTheTimeout) {
  if (!gloo_available()) GTEST_SKIP() << "built without Gloo's headers";
  const auto t0 = std::chrono::steady_clock::now();
  // World size 2, but only rank 0 starts: it must give up (naming the store), not hang.
  const auto codes = run_ranks(1, [](DistEnv env) {
    env.world_size = 2;
    try {
      make_process_group(env, c10::Device(c10::kCPU), std::chrono::seconds(2));
    } catch (const Error& e) {
      return std::string(e.what()).find("cannot join the store at 127.0.0.1:") != std::string::npos;
    }
    return false;
  });
  EXPECT_EQ(codes, (std::vector<int>{0}));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

// A small model whose initial weights depend on the seed only.
torch::nn::Sequential make_net(uint64_t seed) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::ReLU(),
                               torch::nn::Linear(16, 3));
}

// Gradients of the mean loss over `x`, `y` on the seed's model, computed in one process.
std::vector<at::Tensor> reference_grads(const at::Tensor& x, const at::Tensor& y) {
  auto net = make_net(7);
  at::cross_entropy_loss(net->forward(x), y).backward();
  std::vector<at::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.grad().clone());
  return out;
}

// 2 ranks x 2 micro-batches of 4 examples ≡ one process on the 16 examples: the Reducer
// averages the accumulated gradients over the ranks on the last micro-batch only (after the
// first, each rank's gradient is still its own), and rank 1's
// differently initialised model is overwritten by rank 0's at start. Done for two steps (the
// second after the Reducer rebuilt its buckets).
TEST(GradSyncTest, TwoRanksWithAccumulationEqualOneProcessOnTheWholeBatch) {
  if (!gloo_available()) GTEST_SKIP() << "built without Gloo's headers";
  torch::manual_seed(123);
  const at::Tensor x = at::randn({2, 16, 8});
  const at::Tensor y = at::randint(0, 3, {2, 16}, at::kLong);
  const auto codes = run_ranks(2, [&](const DistEnv& env) {
    auto group = make_process_group(env, c10::Device(c10::kCPU), std::chrono::seconds(30));
    auto net = make_net(env.rank == 0 ? 7 : 99);
    std::vector<at::Tensor> params = net->parameters();
    broadcast_from_rank0(group, params);
    std::vector<std::string> names;
    for (const auto& item : net->named_parameters()) names.push_back(item.key());
    GradSync sync(params, names, group);
    for (int64_t step = 0; step < 2; ++step) {
      for (auto& p : params) p.mutable_grad() = at::Tensor();
      for (int64_t micro = 0; micro < 2; ++micro) {
        const int64_t begin = env.rank * 8 + micro * 4;
        sync.before_forward(/*sync=*/micro == 1);
        const at::Tensor loss =
            at::cross_entropy_loss(net->forward(x[step].slice(0, begin, begin + 4)),
                                   y[step].slice(0, begin, begin + 4)) /
            2;
        loss.backward();
        if (micro == 0) {
          // An accumulation micro-step communicates nothing: the gradient is this rank's own
          // (an all-reduce would have averaged it with the other rank's, different, one).
          const auto own = reference_grads(x[step].slice(0, begin, begin + 4),
                                           y[step].slice(0, begin, begin + 4));
          for (size_t i = 0; i < params.size(); ++i) {
            const double diff = (params[i].grad() - own[i] / 2).abs().max().item<double>();
            if (diff > 1e-6) {
              fprintf(stderr, "rank %ld step %ld micro 0 %s: not the rank's own gradient (%g)\n",
                      static_cast<long>(env.rank), static_cast<long>(step), names[i].c_str(), diff);
              return false;
            }
          }
        }
      }
      const auto expected = reference_grads(x[step], y[step]);
      for (size_t i = 0; i < params.size(); ++i) {
        const double diff = (params[i].grad() - expected[i]).abs().max().item<double>();
        if (diff > 1e-6) {
          fprintf(stderr, "rank %ld step %ld %s: |diff| %g\n", static_cast<long>(env.rank),
                  static_cast<long>(step), names[i].c_str(), diff);
          return false;
        }
      }
    }
    return true;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// The agreements a data-parallel trainer needs besides gradients, on 3 Gloo ranks: the smallest
// of a tuned value, rank 0's string, sums, and the stop vote, whose outcome every rank reads one
// step after some rank voted.
TEST(DistContextTest, RanksAgreeOnValuesAndStopTogetherOneStepAfterAVote) {
  if (!gloo_available()) GTEST_SKIP() << "built without Gloo's headers";
  const auto codes = run_ranks(3, [](const DistEnv& env) {
    DistContext dist(env, c10::Device(c10::kCPU), std::chrono::seconds(30));
    bool ok = dist.min(10 - env.rank) == 8;
    ok = ok && dist.from_rank0("a", env.rank == 0 ? "from zero" : "x") == "from zero";
    ok = ok && dist.from_rank0("b", env.rank == 0 ? "again" : "y") == "again";
    at::Tensor t = at::full({2}, static_cast<double>(env.rank), at::kDouble);
    dist.sum(t);
    ok = ok && t[0].item<double>() == 3.0 && t[1].item<double>() == 3.0;
    StopVote vote(dist);
    // Rank 2 wants to stop at step 3 only: every rank learns it at step 4, none before.
    for (int step = 0; step < 6; ++step) {
      const bool stop = vote.cast(env.rank == 2 && step == 3);
      if (stop != (step == 4)) {
        fprintf(stderr, "rank %ld step %d: vote read %d\n", static_cast<long>(env.rank), step,
                stop ? 1 : 0);
        ok = false;
      }
    }
    return ok;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

}  // namespace
}  // namespace brrr
