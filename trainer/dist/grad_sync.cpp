#include "trainer/dist/grad_sync.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace brrr {

GradSync::GradSync(std::vector<at::Tensor> params, const std::vector<std::string>& names,
                   c10::intrusive_ptr<c10d::ProcessGroup> group, int64_t bucket_bytes,
                   int64_t first_bucket_bytes) {
  // One bucket for the first step (the order of backward is not known yet); the Reducer then
  // rebuilds buckets of bucket_bytes (the first of first_bucket_bytes) in the order observed.
  auto [buckets, limits] = c10d::compute_bucket_assignment_by_size(
      params, {std::numeric_limits<size_t>::max()}, std::vector<bool>(params.size(), false));
  std::reverse(buckets.begin(), buckets.end());
  std::unordered_map<size_t, std::string> param_names;
  for (size_t i = 0; i < names.size(); ++i) param_names[i] = names[i];
  const std::vector<bool> sparse(params.size(), false);
  std::vector<int> device_ids;  // as DDP gives them: the GPU of a single-device module
  if (!params.empty() && params.front().is_cuda())
    device_ids.push_back(params.front().get_device());
  reducer_ = std::make_shared<c10d::Reducer>(
      std::move(params), std::move(buckets), std::move(group), sparse, bucket_bytes,
      /*find_unused_parameters=*/false, /*gradient_as_bucket_view=*/false, std::move(param_names),
      first_bucket_bytes, /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
      /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
  // DDP's logger: the Reducer times backward's compute and communication on the steps it
  // samples (CUDA events on GPUs), and the logger turns that into running means.
  logger_ = std::make_shared<c10d::Logger>(reducer_);
  reducer_->set_logger(logger_);
  logger_->set_construction_data_and_log("brrr", device_ids, /*output_device=*/-1,
                                         /*broadcast_buffers=*/false, /*has_sync_bn=*/false,
                                         /*static_graph=*/false);
}

GradSync::~GradSync() = default;

void GradSync::before_forward(bool sync) {
  if (!sync) return;  // the Reducer's hooks do nothing until prepare_for_backward arms them
  logger_->set_runtime_stats_and_log();  // the previous synced step's times, when sampled
  reducer_->rebuild_buckets();
  reducer_->prepare_for_forward();
  reducer_->prepare_for_backward({});
}

std::map<std::string, double> GradSync::backward_times() const {
  const at::DDPLoggingData data = logger_->get_ddp_logging_data();
  std::map<std::string, double> out;
  const std::pair<const char*, const char*> fields[] = {
      {"backward_compute", "avg_backward_compute_time"},
      {"backward_comm", "avg_backward_comm_time"},
      {"overlap", "avg_backward_compute_comm_overlap_time"}};
  for (const auto& [name, key] : fields) {
    const auto it = data.ints_map.find(key);
    if (it != data.ints_map.end() && it->second > 0)
      out[name] = static_cast<double>(it->second) / 1e6;
  }
  return out;
}

void broadcast_from_rank0(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                          const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return;
  at::NoGradGuard no_grad;  // the copies into parameters are not part of any graph
  constexpr size_t kBufferBytes = 250 << 20;  // torch.distributed's module-state broadcast size
  c10d::broadcast_coalesced(group, tensors, kBufferBytes, /*rank=*/0);
}

}  // namespace brrr
