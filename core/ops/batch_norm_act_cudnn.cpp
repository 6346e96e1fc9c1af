// batch_norm_act through cuDNN: one cudnnBatchNormalizationForwardTrainingEx and one
// cudnnBatchNormalizationBackwardEx per call, NHWC, the persistent spatial mode, with the ReLU
// (and the residual add) as the call's bnOps. These are cuDNN's "legacy" batch-norm entry points
// (also what ATen's cudnn_batch_norm calls, with CUDNN_BATCHNORM_OPS_BN); cuDNN 9 still ships
// them. The handle is ATen's for the current device, bound to the current stream; the
// workspace and reserve space come from the caching allocator.
#include <ATen/ATen.h>
#include <ATen/cudnn/Handle.h>
#include <cudnn.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/ops/batch_norm_act.h"

namespace brrr::detail {

namespace {

void check(cudnnStatus_t status, const char* what, const at::Tensor& x) {
  if (status == CUDNN_STATUS_NOT_SUPPORTED) {
    throw BatchNormActUnsupported(
        fmt::format("batch_norm_act: cuDNN's {} does not support x {} [{}]", what,
                    c10::toString(x.scalar_type()), fmt::join(x.sizes(), ", ")));
  }
  if (status != CUDNN_STATUS_SUCCESS) {
    throw Error(fmt::format("batch_norm_act: cuDNN's {} failed for x {} [{}]: {}", what,
                            c10::toString(x.scalar_type()), fmt::join(x.sizes(), ", "),
                            cudnnGetErrorString(status)));
  }
}

/// The descriptors of one call: x's (also y's, z's, dy's, dx's, dz's) and the per-channel one.
class Descriptors {
 public:
  explicit Descriptors(const at::Tensor& x) {
    check(cudnnCreateTensorDescriptor(&data), "tensor descriptor", x);
    check(cudnnCreateTensorDescriptor(&channel), "tensor descriptor", x);
    check(cudnnCreateActivationDescriptor(&relu), "activation descriptor", x);
    const cudnnDataType_t type =
        x.scalar_type() == at::kBFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    check(cudnnSetTensor4dDescriptor(data, CUDNN_TENSOR_NHWC, type, static_cast<int>(x.size(0)),
                                     static_cast<int>(x.size(1)), static_cast<int>(x.size(2)),
                                     static_cast<int>(x.size(3))),
          "cudnnSetTensor4dDescriptor", x);
    check(cudnnDeriveBNTensorDescriptor(channel, data, kMode), "cudnnDeriveBNTensorDescriptor", x);
    check(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
          "cudnnSetActivationDescriptor", x);
  }
  ~Descriptors() {
    cudnnDestroyActivationDescriptor(relu);
    cudnnDestroyTensorDescriptor(channel);
    cudnnDestroyTensorDescriptor(data);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  static constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  cudnnTensorDescriptor_t data = nullptr;
  cudnnTensorDescriptor_t channel = nullptr;
  cudnnActivationDescriptor_t relu = nullptr;
};

cudnnBatchNormOps_t ops_of(bool with_residual) {
  return with_residual ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
}

at::Tensor bytes(size_t n, const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(std::max<size_t>(n, 1))}, like.options().dtype(at::kByte));
}

void check_int_sizes(const at::Tensor& x) {
  for (int64_t s : x.sizes()) {
    if (s > std::numeric_limits<int>::max()) {
      throw DataError(fmt::format("batch_norm_act: cuDNN takes int sizes, got x [{}]",
                                  fmt::join(x.sizes(), ", ")));
    }
  }
}

}  // namespace

bool batch_norm_act_cudnn_built() {
  return true;
}

std::vector<at::Tensor> batch_norm_act_forward_cudnn(const at::Tensor& x,
                                                     const at::Tensor& residual,
                                                     const at::Tensor& weight,
                                                     const at::Tensor& bias,
                                                     const at::Tensor& running_mean,
                                                     const at::Tensor& running_var,
                                                     double momentum, double eps) {
  check_int_sizes(x);
  cudnnHandle_t handle = at::native::getCudnnHandle();  // bound to the current stream
  Descriptors d(x);
  const bool with_residual = residual.defined();
  const cudnnBatchNormOps_t ops = ops_of(with_residual);
  size_t workspace_bytes = 0;
  size_t reserve_bytes = 0;
  check(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
            handle, Descriptors::kMode, ops, d.data, with_residual ? d.data : nullptr, d.data,
            d.channel, d.relu, &workspace_bytes),
        "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize", x);
  check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, Descriptors::kMode, ops,
                                                             d.relu, d.data, &reserve_bytes),
        "cudnnGetBatchNormalizationTrainingExReserveSpaceSize", x);
  const at::Tensor workspace = bytes(workspace_bytes, x);
  at::Tensor reserve = bytes(reserve_bytes, x);
  at::Tensor y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  const int64_t channels = x.size(1);
  at::Tensor mean = at::empty({channels}, weight.options());
  at::Tensor invstd = at::empty({channels}, weight.options());
  const float one = 1.0f;
  const float zero = 0.0f;
  check(cudnnBatchNormalizationForwardTrainingEx(
            handle, Descriptors::kMode, ops, &one, &zero, d.data, x.const_data_ptr(),
            with_residual ? d.data : nullptr,
            with_residual ? residual.const_data_ptr() : nullptr, d.data, y.mutable_data_ptr(),
            d.channel, weight.const_data_ptr(), bias.const_data_ptr(), momentum,
            running_mean.defined() ? running_mean.mutable_data_ptr() : nullptr,
            running_var.defined() ? running_var.mutable_data_ptr() : nullptr, eps,
            mean.mutable_data_ptr(), invstd.mutable_data_ptr(), d.relu,
            workspace.mutable_data_ptr(), workspace.numel(), reserve.mutable_data_ptr(),
            reserve.numel()),
        "cudnnBatchNormalizationForwardTrainingEx", x);
  return {y, mean, invstd, reserve};
}

std::vector<at::Tensor> batch_norm_act_backward_cudnn(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& y, const at::Tensor& weight,
    const at::Tensor& bias, const at::Tensor& mean, const at::Tensor& invstd,
    const at::Tensor& reserve, double eps, bool with_residual) {
  cudnnHandle_t handle = at::native::getCudnnHandle();
  Descriptors d(x);
  const cudnnBatchNormOps_t ops = ops_of(with_residual);
  size_t workspace_bytes = 0;
  check(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
            handle, Descriptors::kMode, ops, d.data, d.data, d.data,
            with_residual ? d.data : nullptr, d.data, d.channel, d.relu, &workspace_bytes),
        "cudnnGetBatchNormalizationBackwardExWorkspaceSize", x);
  const at::Tensor workspace = bytes(workspace_bytes, x);
  at::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  at::Tensor dz = with_residual ? at::empty_like(x, at::MemoryFormat::ChannelsLast) : at::Tensor();
  at::Tensor dweight = at::empty_like(weight);
  at::Tensor dbias = at::empty_like(bias);
  const float one = 1.0f;
  const float zero = 0.0f;
  // cuDNN reads the reserve space (written by the forward) but takes it as void*.
  check(cudnnBatchNormalizationBackwardEx(
            handle, Descriptors::kMode, ops, &one, &zero, &one, &zero, d.data, x.const_data_ptr(),
            d.data, y.const_data_ptr(), d.data, dy.const_data_ptr(),
            with_residual ? d.data : nullptr, with_residual ? dz.mutable_data_ptr() : nullptr,
            d.data, dx.mutable_data_ptr(), d.channel, weight.const_data_ptr(),
            bias.const_data_ptr(), dweight.mutable_data_ptr(), dbias.mutable_data_ptr(), eps,
            mean.const_data_ptr(), invstd.const_data_ptr(), d.relu, workspace.mutable_data_ptr(),
            workspace.numel(), const_cast<void*>(reserve.const_data_ptr()), reserve.numel()),
        "cudnnBatchNormalizationBackwardEx", x);
  return {dx, dz, dweight, dbias};
}

}  // namespace brrr::detail
