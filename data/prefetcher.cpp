#include "data/prefetcher.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>

#include <chrono>

#include "core/error.h"

namespace brrr {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Prefetcher::Prefetcher(DataLoader& loader, c10::Device device) : loader_(loader), device_(device) {
  if (device_.is_cpu()) return;
  if (!device_.is_cuda()) {
    throw ConfigError(fmt::format("Prefetcher: device must be cpu or cuda, got {}", device_.str()));
  }
  c10::impl::VirtualGuardImpl impl(device_.type());
  if (!device_.has_index()) device_ = impl.getDevice();
  copy_stream_ = impl.getStreamFromGlobalPool(device_, /*isHighPriority=*/false);
}

Prefetcher::~Prefetcher() {
  // The DMA may still read these slots; wait for exactly those copies (no device-wide sync).
  if (staged_ && staged_->copied) staged_->copied->synchronize();
  for (const Staged& s : retired_) s.copied->synchronize();
}

void Prefetcher::start_epoch(int64_t epoch, int64_t skip_batches) {
  reset_staged();
  loader_.start_epoch(epoch, skip_batches);
}

std::optional<Batch> Prefetcher::next() {
  if (device_.is_cpu()) {
    const auto t0 = Clock::now();
    std::optional<Batch> batch = loader_.next();
    last_wait_seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
    return batch;
  }
  drop_completed();
  // A loader.start_epoch() called behind our back moved the position: the staged batch is stale.
  if (primed_ && staged_ &&
      (loader_.epoch() != staged_epoch_ || loader_.batches_consumed() != staged_consumed_)) {
    reset_staged();
  }
  double wait = 0.0;
  if (!primed_) {
    staged_ = stage(&wait);
    primed_ = true;
  }
  if (!staged_) {  // end of the epoch; the next call re-primes (after start_epoch)
    primed_ = false;
    last_wait_seconds_ = wait;
    return std::nullopt;
  }
  Staged current = std::move(*staged_);
  staged_.reset();
  last_copy_events_ = {current.copy_begin, current.copied};
  c10::impl::VirtualGuardImpl impl(device_.type());
  const c10::Stream compute = impl.getStream(device_);
  current.copied->block(compute);  // the compute stream waits for the copy; the host does not
  for (auto& [key, tensor] : current.device) tensor.record_stream(compute);
  Batch out = current.device;
  retire(std::move(current));
  try {
    staged_ = stage(&wait);  // batch N+1: its copy overlaps the caller's step N
  } catch (const StopRequested&) {
    // Batch N is here: hand it out. The next call stages N+1 afresh and, if the stop still
    // stands, raises it before anything is consumed.
    primed_ = false;
  }
  last_wait_seconds_ = wait;
  return out;
}

std::optional<Prefetcher::Staged> Prefetcher::stage(double* wait_seconds) {
  const auto t0 = Clock::now();
  std::optional<Batch> host = loader_.next();
  *wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  staged_epoch_ = loader_.epoch();
  staged_consumed_ = loader_.batches_consumed();
  if (!host) return std::nullopt;
  Staged s;
  s.host = std::move(*host);
  c10::StreamGuard guard(*copy_stream_);
  // Timing-enabled events (BACKEND_DEFAULT), so the step timer can tell how much of the copy the
  // compute stream had to wait for.
  s.copy_begin = std::make_shared<c10::Event>(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
  s.copy_begin->record(*copy_stream_);
  for (const auto& [key, tensor] : s.host) {
    // (B, ...) host view of the slot -> (B, ...) on the device; a DMA when the slot is pinned.
    s.device[key] = tensor.to(device_, /*non_blocking=*/true);
  }
  s.copied = std::make_shared<c10::Event>(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
  s.copied->record(*copy_stream_);
  return s;
}

void Prefetcher::retire(Staged staged) {
  staged.device.clear();  // the caller owns the device tensors now
  retired_.push_back(std::move(staged));
  while (retired_.size() > kMaxRetired) {
    retired_.front()
        .copied->synchronize();  // the GPU is kMaxRetired steps behind: wait on that copy
    retired_.pop_front();
  }
}

void Prefetcher::drop_completed() {
  while (!retired_.empty() && retired_.front().copied->query()) retired_.pop_front();
}

void Prefetcher::reset_staged() {
  if (staged_) retire(std::move(*staged_));
  staged_.reset();
  primed_ = false;
}

}  // namespace brrr
