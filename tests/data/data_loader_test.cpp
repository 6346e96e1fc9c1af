#include "data/data_loader.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "core/rng.h"
#include "tests/data/loader_test_util.h"

namespace brrr {
namespace {

using testing::child_pids;
using testing::shm_entries;

DataLoaderOptions base_options(int64_t workers) {
  return DataLoaderOptions().batch_size(4).shuffle(true).seed(1234).num_workers(workers);
}

Batch clone(const Batch& b) {
  Batch out;
  for (const auto& [k, t] : b) out[k] = t.clone();
  return out;
}

// Every batch of `epoch`, cloned so the ring slots are released.
std::vector<Batch> load_epoch(DataLoader& loader, int64_t epoch, int64_t skip = 0) {
  loader.start_epoch(epoch, skip);
  std::vector<Batch> out;
  while (std::optional<Batch> b = loader.next()) out.push_back(clone(*b));
  return out;
}

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << " batch " << i;
    for (const auto& [k, t] : a[i]) {
      ASSERT_TRUE(t.sizes() == b[i].at(k).sizes() && t.equal(b[i].at(k)))
          << what << ": batch " << i << " key " << k << " differs";
    }
  }
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(DataLoaderTest, BatchesIdenticalForAnyWorkerCount) {
  auto ds = std::make_shared<testing::PatternDataset>(37);
  DataLoader reference(ds, base_options(0));
  const std::vector<Batch> e0 = load_epoch(reference, 0);
  const std::vector<Batch> e1 = load_epoch(reference, 1);
  ASSERT_EQ(e0.size(), 10u);
  EXPECT_EQ(e0.back().at("x").size(0), 1) << "the final short batch keeps its true length";
  for (int64_t workers : {1, 2, 4, 8}) {
    DataLoader loader(ds, base_options(workers).persistent_workers(true));
    expect_same(load_epoch(loader, 0), e0, fmt::format("{} workers epoch 0", workers));
    expect_same(load_epoch(loader, 1), e1, fmt::format("{} workers epoch 1", workers));
  }
  EXPECT_TRUE(child_pids().empty());
}

TEST(DataLoaderTest, SamplesComeFromSeedEpochIndexRng) {
  auto ds = std::make_shared<testing::PatternDataset>(10);
  DataLoader loader(ds, base_options(2));
  const std::vector<Batch> batches = load_epoch(loader, 3);
  const std::vector<int64_t> order = RandomSampler(10, 1234).indices(3);
  int64_t pos = 0;
  for (const Batch& b : batches) {
    for (int64_t row = 0; row < b.at("label").size(0); ++row, ++pos) {
      Rng rng(mix_seed(1234, 3, static_cast<uint64_t>(order[pos])));
      const Sample expect = ds->get(order[pos], rng);
      EXPECT_EQ(b.at("label")[row].item<int64_t>(), order[pos]);
      EXPECT_TRUE(b.at("x")[row].equal(expect.at("x"))) << "sample " << order[pos];
      EXPECT_TRUE(b.at("noise")[row].equal(expect.at("noise"))) << "sample " << order[pos];
    }
  }
  EXPECT_EQ(pos, 10);
}

TEST(DataLoaderTest, EverySampleOnceAndReshuffledEachEpoch) {
  auto ds = std::make_shared<testing::PatternDataset>(50);
  DataLoader loader(ds, base_options(2).batch_size(8).drop_last(false));
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch : {0, 1}) {
    std::vector<int64_t> labels;
    for (const Batch& b : load_epoch(loader, epoch)) {
      const at::Tensor l = b.at("label");
      labels.insert(labels.end(), l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel());
    }
    orders.push_back(labels);
    std::sort(labels.begin(), labels.end());
    EXPECT_EQ(labels, SequentialSampler(50).indices(0)) << "epoch " << epoch;
  }
  EXPECT_NE(orders[0], orders[1]);
}

TEST(DataLoaderTest, DropLastAndEpochEnd) {
  auto ds = std::make_shared<testing::PatternDataset>(10);
  DataLoader loader(ds, base_options(1).drop_last(true));
  EXPECT_EQ(loader.batches_per_epoch(), 2);
  EXPECT_EQ(load_epoch(loader, 0).size(), 2u);
  EXPECT_EQ(loader.batches_consumed(), 2);
  EXPECT_FALSE(loader.next().has_value()) << "next() after the end must stay nullopt";
  EXPECT_EQ(loader.stats().batches_produced, 2);
}

TEST(DataLoaderTest, StartEpochSkipEqualsSkippingBatches) {
  auto ds = std::make_shared<testing::PatternDataset>(30);
  DataLoader reference(ds, base_options(0));
  const std::vector<Batch> full = load_epoch(reference, 2);
  for (int64_t workers : {0, 3}) {
    DataLoader loader(ds, base_options(workers));
    const std::vector<Batch> resumed = load_epoch(loader, 2, 3);
    expect_same(resumed, std::vector<Batch>(full.begin() + 3, full.end()),
                fmt::format("{} workers", workers));
    EXPECT_EQ(loader.epoch(), 2);
    EXPECT_EQ(loader.batches_consumed(), loader.batches_per_epoch());
  }
}

TEST(DataLoaderTest, StartEpochMidEpochDiscardsInFlightWork) {
  auto ds = std::make_shared<testing::PatternDataset>(40);
  DataLoader reference(ds, base_options(0));
  const std::vector<Batch> e5 = load_epoch(reference, 5);
  DataLoader loader(ds, base_options(2).prefetch_factor(3).persistent_workers(true));
  loader.start_epoch(4);
  ASSERT_TRUE(loader.next().has_value());  // epoch 4 batches are now in flight
  ASSERT_TRUE(loader.next().has_value());
  expect_same(load_epoch(loader, 5), e5, "after a mid-epoch restart");
}

TEST(DataLoaderTest, PersistentWorkersLookAheadIntoTheNextEpoch) {
  auto ds = std::make_shared<testing::PatternDataset>(37);
  DataLoader reference(ds, base_options(0));
  std::vector<std::vector<Batch>> want;
  for (int64_t epoch = 0; epoch < 5; ++epoch) want.push_back(load_epoch(reference, epoch));
  DataLoader loader(ds, base_options(2).persistent_workers(true));
  expect_same(load_epoch(loader, 0), want[0], "epoch 0");
  EXPECT_GT(loader.batches_ahead(), 0) << "epoch 1 should be in flight once epoch 0 is all sent";
  expect_same(load_epoch(loader, 1), want[1], "epoch 1, adopted from the lookahead");
  ASSERT_GT(loader.batches_ahead(), 0);
  // Any other start discards the lookahead: a resume position, a jump, a repeat.
  expect_same(load_epoch(loader, 2, 3), std::vector<Batch>(want[2].begin() + 3, want[2].end()),
              "epoch 2 from batch 3");
  expect_same(load_epoch(loader, 4), want[4], "epoch 4 after a jump");
  expect_same(load_epoch(loader, 4), want[4], "epoch 4 again");
  EXPECT_EQ(loader.stats().batches_produced, 10 + 10 + 7 + 10 + 10);
}

TEST(DataLoaderTest, LookaheadFailureIsRaisedOnlyIfThatEpochStarts) {
  // drop_last leaves one of 37 samples out of each epoch: find a seed whose epoch 0 drops the
  // sample that epoch 1 loads in its first batch (which the lookahead loads early).
  uint64_t seed = 0;
  int64_t bad = -1;
  for (; seed < 1000 && bad < 0; ++seed) {
    const std::vector<int64_t> e0 = RandomSampler(37, seed).indices(0);
    const std::vector<int64_t> e1 = RandomSampler(37, seed).indices(1);
    if (std::find(e1.begin(), e1.begin() + 4, e0.back()) != e1.begin() + 4) bad = e0.back();
  }
  ASSERT_GE(bad, 0);
  --seed;
  auto ds = std::make_shared<testing::ThrowingDataset>(37, bad);
  const auto options =
      base_options(2).seed(static_cast<int64_t>(seed)).drop_last(true).persistent_workers(true);
  {
    DataLoader loader(ds, options);
    EXPECT_EQ(load_epoch(loader, 0).size(), 9u);
    ASSERT_GT(loader.batches_ahead(), 0);
    const std::string what = what_of([&] { load_epoch(loader, 1); });
    EXPECT_TRUE(contains(what, fmt::format("corrupt record {}", bad))) << what;
  }
  {
    DataLoader loader(ds, options);
    EXPECT_EQ(load_epoch(loader, 0).size(), 9u);
    ASSERT_GT(loader.batches_ahead(), 0);
    EXPECT_EQ(load_epoch(loader, 0).size(), 9u) << "a lookahead that is not used must not fail";
  }
  EXPECT_TRUE(child_pids().empty());
}

TEST(DataLoaderTest, WorkerExceptionNamesWorkerSampleAndMessage) {
  const auto shm_before = shm_entries();
  auto ds = std::make_shared<testing::ThrowingDataset>(40, 13);
  DataLoader loader(ds, DataLoaderOptions().batch_size(4).num_workers(2));
  loader.start_epoch(0);
  std::string first;
  try {
    while (loader.next()) {
    }
    FAIL() << "no exception";
  } catch (const WorkerError& e) {
    first = e.what();
  }
  // Sample 13 is in batch 3, which round-robin gives to worker 1.
  EXPECT_EQ(first, "data worker 1 failed on sample 13 (batch 3): corrupt record 13");
  EXPECT_EQ(what_of([&] { loader.next(); }), first) << "the loader must stay failed";
  EXPECT_THROW(loader.start_epoch(1), WorkerError);
  EXPECT_TRUE(child_pids().empty()) << "workers not reaped after a failure";
  EXPECT_EQ(shm_entries(), shm_before);
}

TEST(DataLoaderTest, InProcessExceptionPropagates) {
  auto ds = std::make_shared<testing::ThrowingDataset>(40, 13);
  DataLoader loader(ds, DataLoaderOptions().batch_size(4));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(loader.next().has_value());
  EXPECT_EQ(what_of([&] { loader.next(); }), "corrupt record 13");
  EXPECT_EQ(what_of([&] { loader.next(); }), "corrupt record 13");
}

TEST(DataLoaderTest, KilledWorkerIsReportedQuickly) {
  const auto shm_before = shm_entries();
  auto ds = std::make_shared<testing::KillingDataset>(40, 9);
  DataLoader loader(ds, DataLoaderOptions().batch_size(4).num_workers(2));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string message = what_of([&] {
    while (loader.next()) {
    }
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 3.0);
  // Sample 9 is in batch 2 (worker 0).
  EXPECT_TRUE(contains(message, "data worker 0 (pid ")) << message;
  EXPECT_TRUE(contains(message, "was killed by signal 9 (SIGKILL) while loading batch 2"))
      << message;
  EXPECT_THROW(loader.next(), WorkerError);
  EXPECT_TRUE(child_pids().empty());
  EXPECT_EQ(shm_entries(), shm_before);
}

TEST(DataLoaderTest, TimeoutBoundsTheWaitForOneBatch) {
  auto ds = std::make_shared<testing::SleepingDataset>(8, 400);
  DataLoader loader(ds, DataLoaderOptions().batch_size(2).num_workers(2).timeout(0.1));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string message = what_of([&] { loader.next(); });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.5);
  EXPECT_TRUE(contains(message, "no batch from worker 0 within 0.1 s (timeout)")) << message;
  EXPECT_TRUE(child_pids().empty());
}

TEST(DataLoaderTest, AStopRequestEndsTheWaitAndTheLoaderStaysUsable) {
  // Each sample takes 300 ms: a stop asked for after 100 ms ends the wait within a poll.
  auto ds = std::make_shared<testing::SleepingDataset>(8, 300);
  std::atomic<bool> stop{false};
  DataLoader loader(ds, DataLoaderOptions().batch_size(2).num_workers(2).stop_requested(
                            [&] { return stop.load(); }));
  std::thread asker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(loader.next(), StopRequested);
  asker.join();
  // Well before batch 0 (two samples of 300 ms each) could have come.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.5);
  // Nothing was lost: with the stop withdrawn, the epoch continues from batch 0.
  stop = false;
  int64_t batches = 0;
  while (loader.next()) ++batches;
  EXPECT_EQ(batches, 4);
}

TEST(DataLoaderTest, ALongWaitNamesTheBatchTheWorkerAndItsState) {
  auto ds = std::make_shared<testing::SleepingDataset>(8, 20);
  DataLoader loader(ds, DataLoaderOptions().batch_size(2).num_workers(2).stall_warning_s(0.3));
  ASSERT_TRUE(loader.next().has_value());  // workers are up
  const std::vector<pid_t> workers = child_pids();
  ASSERT_EQ(workers.size(), 2u);
  for (pid_t pid : workers) kill(pid, SIGSTOP);
  std::thread resumer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    for (pid_t pid : workers) kill(pid, SIGCONT);
  });
  ::testing::internal::CaptureStderr();
  // Batch 1 may already be in the ring; batch 2 or 3 waits for a stopped worker.
  while (loader.next()) {
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  resumer.join();
  EXPECT_TRUE(contains(err, "data loader: waited ")) << err;
  EXPECT_TRUE(contains(err, " of epoch 0 from worker ")) << err;
  EXPECT_TRUE(contains(err, "stopped (SIGSTOP/SIGTSTP; SIGCONT resumes it)")) << err;
}

// 1 GiB examples (never touched: only their shape builds the ring).
class HugeSampleDataset : public Dataset {
 public:
  int64_t size() const override { return 1024; }
  Sample get(int64_t, Rng&) const override {
    return {{"x", at::empty({int64_t{1} << 30}, at::kByte)}};
  }
  std::string describe() const override { return "huge"; }
};

TEST(DataLoaderTest, ARingLargerThanTheMachineIsAConfigErrorNamingTheBatchSize) {
  // 1024 x 1 GiB batches in (2 x 2 + 4) slots: 8 TiB, more than any machine has.
  try {
    DataLoader loader(std::make_shared<HugeSampleDataset>(),
                      DataLoaderOptions().batch_size(1024).num_workers(2));
    ADD_FAILURE() << "an 8 TiB ring was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "data.batch_size");
    EXPECT_TRUE(contains(e.what(), "1024 is too large for this machine")) << e.what();
    EXPECT_TRUE(contains(e.what(), "holds 8 batches (2 workers x prefetch_factor 2 + 4)"))
        << e.what();
  }
  EXPECT_TRUE(child_pids().empty());
}

TEST(DataLoaderTest, DestructorMidEpochLeavesNothingBehind) {
  const auto shm_before = shm_entries();
  {
    auto ds = std::make_shared<testing::SleepingDataset>(64, 10);
    DataLoader loader(ds, base_options(4).prefetch_factor(2));
    ASSERT_TRUE(loader.next().has_value());
    EXPECT_EQ(child_pids().size(), 4u);
  }
  EXPECT_TRUE(child_pids().empty());
  EXPECT_EQ(shm_entries(), shm_before);
}

TEST(DataLoaderTest, WorkersIgnoreSigintAndNonPersistentOnesEndWithTheEpoch) {
  auto ds = std::make_shared<testing::PatternDataset>(24);
  DataLoader reference(ds, base_options(0));
  const std::vector<Batch> e0 = load_epoch(reference, 0);
  DataLoader loader(ds, base_options(2).persistent_workers(false));
  loader.start_epoch(0);
  std::vector<Batch> got;
  got.push_back(clone(*loader.next()));
  const std::vector<pid_t> workers = child_pids();
  ASSERT_EQ(workers.size(), 2u);
  for (pid_t pid : workers) kill(pid, SIGINT);  // Ctrl-C reaches the whole process group
  while (std::optional<Batch> b = loader.next()) got.push_back(clone(*b));
  expect_same(got, e0, "after SIGINT to the workers");
  EXPECT_TRUE(child_pids().empty()) << "non-persistent workers outlived their epoch";
  expect_same(load_epoch(loader, 0), e0, "second run of epoch 0");
}

TEST(DataLoaderTest, ShapeMismatchNamesSampleKeyAndShapes) {
  auto ds = std::make_shared<testing::ShapeMismatchDataset>(20, 5);
  const std::string expected = "sample 5 key 'x': shape [3, 5], expected [3, 4]";
  DataLoader in_process(ds, DataLoaderOptions().batch_size(4));
  std::string message;
  try {
    while (in_process.next()) {
    }
  } catch (const DataError& e) {
    message = e.what();
  }
  EXPECT_TRUE(contains(message, expected)) << message;
  DataLoader workers(ds, DataLoaderOptions().batch_size(4).num_workers(2));
  message = what_of([&] {
    while (workers.next()) {
    }
  });
  EXPECT_TRUE(contains(message, "data worker 1 failed on sample 5 (batch 1): " + expected))
      << message;
}

TEST(DataLoaderTest, HeldSlotsFailClearlyAndRecover) {
  auto ds = std::make_shared<testing::PatternDataset>(100);
  DataLoader loader(ds, DataLoaderOptions().batch_size(2));
  std::vector<Batch> held;
  for (int64_t i = 0; i < DataLoader::kConsumerSlots; ++i) held.push_back(*loader.next());
  const std::string message = what_of([&] { loader.next(); });
  EXPECT_TRUE(contains(message, "all 4 batch slots are held by the caller")) << message;
  held.erase(held.begin());
  EXPECT_TRUE(loader.next().has_value()) << "releasing a batch must free its slot";
}

TEST(DataLoaderTest, BatchesOutliveTheLoader) {
  auto ds = std::make_shared<testing::PatternDataset>(8);
  Batch kept;
  Batch copy;
  {
    DataLoader loader(ds, DataLoaderOptions().batch_size(4).num_workers(1));
    kept = *loader.next();
    copy = clone(kept);
  }
  EXPECT_TRUE(kept.at("x").equal(copy.at("x")));
}

TEST(DataLoaderTest, DistributedRanksPartitionTheEpoch) {
  auto ds = std::make_shared<testing::PatternDataset>(30);
  std::vector<int64_t> all;
  for (int64_t rank = 0; rank < 3; ++rank) {
    DataLoader loader(ds, base_options(1).rank(rank).world_size(3).batch_size(5));
    EXPECT_EQ(loader.batches_per_epoch(), 2);
    for (const Batch& b : load_epoch(loader, 1)) {
      const at::Tensor l = b.at("label");
      all.insert(all.end(), l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel());
    }
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, SequentialSampler(30).indices(0));
}

TEST(DataLoaderTest, OptionsAreValidatedWithValues) {
  auto ds = std::make_shared<testing::PatternDataset>(8);
  EXPECT_EQ(what_of([&] { DataLoader(ds, DataLoaderOptions().batch_size(0)); }),
            "DataLoaderOptions: batch_size must be >= 1, got 0");
  EXPECT_THROW(DataLoader(ds, DataLoaderOptions().num_workers(-2)), ConfigError);
  EXPECT_THROW(DataLoader(ds, DataLoaderOptions().rank(3).world_size(2)), ConfigError);
  EXPECT_THROW(DataLoader(ds, DataLoaderOptions().timeout(-1)), ConfigError);
  EXPECT_THROW(DataLoader(ds, DataLoaderOptions().shuffle(true).sampler(
                                  std::make_shared<SequentialSampler>(8))),
               ConfigError);
  DataLoader loader(ds, DataLoaderOptions().batch_size(4));
  EXPECT_THROW(loader.start_epoch(0, 3), Error);
}

TEST(DataLoaderTest, PinningWithoutCudaIsAClearError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "CUDA present: pinning works";
  auto ds = std::make_shared<testing::PatternDataset>(8);
  DataLoader cpu(ds, DataLoaderOptions().pin_memory(true));  // CPU device: no pinning asked
  EXPECT_FALSE(cpu.pinned());
  const std::string message = what_of(
      [&] { DataLoader(ds, DataLoaderOptions().pin_memory(true).device(c10::Device("cuda"))); });
  EXPECT_TRUE(contains(message, "cannot pin")) << message;
}

}  // namespace
}  // namespace brrr
