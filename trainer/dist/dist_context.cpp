#include "trainer/dist/dist_context.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>

#include <exception>
#include <limits>

#include "core/error.h"
#include "core/log.h"
#include "trainer/dist/grad_sync.h"
#include "trainer/dist/process_group.h"

namespace brrr {

namespace {

// A collective's failure (a peer gone, the timeout passed) as brrr's error, naming this rank.
template <typename F>
void collective(const DistContext& dist, const char* what, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    const std::string message = e.what();
    throw Error(
        fmt::format("rank {} of {}: {} failed: {} (a rank waits at most "
                    "run.dist_timeout_s = {} s for the others; is one of them dead, "
                    "stopped or far behind?)",
                    dist.rank(), dist.world_size(), what, message.substr(0, message.find('\n')),
                    static_cast<double>(dist.timeout().count()) / 1000.0));
  }
}

}  // namespace

DistContext::DistContext(const DistEnv& env, c10::Device device, std::chrono::milliseconds timeout)
    : env_(env),
      device_(device),
      timeout_(timeout),
      group_(make_process_group(env, device, timeout)) {}

DistContext::~DistContext() {
  // What torch.distributed.destroy_process_group() does: NCCL's communicators are released
  // (after pending work) on a normal end; while an error unwinds, a peer may be gone and
  // waiting for it could hang, so they are aborted.
  try {
    if (std::uncaught_exceptions() > 0) {
      group_->abort();
    } else {
      group_->shutdown();
    }
  } catch (const std::exception& e) {
    log::debug("rank {}: ending the process group: {}", env_.rank, e.what());
  }
}

void DistContext::sum(at::Tensor& tensor) const {
  collective(*this, "an all-reduce", [&] {
    std::vector<at::Tensor> tensors = {tensor};
    group_->allreduce(tensors)->wait();
  });
}

int64_t DistContext::min(int64_t value) const {
  at::Tensor t = at::full({1}, value, at::TensorOptions().dtype(at::kLong).device(device_));
  collective(*this, "agreeing on a value", [&] {
    std::vector<at::Tensor> tensors = {t};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MIN;
    group_->allreduce(tensors, options)->wait();
  });
  return t.cpu().item<int64_t>();
}

std::string DistContext::from_rank0(const std::string& what, const std::string& value) {
  const auto store = group_->getStore();
  const std::string full = fmt::format("brrr/agree/{}", agreements_++);
  std::string out;
  collective(*this, fmt::format("agreeing on {}", what).c_str(), [&] {
    if (is_main()) store->set(full, std::vector<uint8_t>(value.begin(), value.end()));
    const std::vector<uint8_t> got = store->get(full);  // waits for rank 0, up to the timeout
    out.assign(got.begin(), got.end());
  });
  return out;
}

void DistContext::broadcast_from_rank0(const std::vector<at::Tensor>& tensors) const {
  collective(*this, "broadcasting rank 0's model",
             [&] { brrr::broadcast_from_rank0(group_, tensors); });
}

bool DistContext::any(bool value) const {
  return min(value ? 0 : 1) == 0;
}

StopVote::StopVote(const DistContext& dist)
    : dist_(dist),
      vote_(at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(dist.device()))) {
  // One device tensor, one host copy and one event for the whole run: a vote is a fill, an
  // all-reduce and (on CUDA) an asynchronous copy, with nothing allocated per step.
  if (dist.device().is_cuda()) {
    host_ = at::zeros({1}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
    ready_ = std::make_shared<c10::Event>(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  } else {
    host_ = vote_;  // Gloo's all-reduce is done when wait() returns
  }
}

StopVote::~StopVote() = default;

bool StopVote::cast(bool want_stop) {
  bool previous = false;
  if (cast_) {
    if (ready_) ready_->synchronize();  // the previous step's vote; this step's work runs on
    previous = host_.item<int32_t>() != 0;
  }
  vote_.fill_(want_stop ? 1 : 0);
  collective(dist_, "the stop vote", [&] {
    std::vector<at::Tensor> tensors = {vote_};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MAX;
    // On CUDA wait() only orders the compute stream after the all-reduce; nothing blocks here.
    dist_.group()->allreduce(tensors, options)->wait();
  });
  if (ready_) {
    host_.copy_(vote_, /*non_blocking=*/true);
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    ready_->record(impl.getStream(dist_.device()));
  }
  cast_ = true;
  return previous;
}

}  // namespace brrr
