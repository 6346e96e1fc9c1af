// bench_resnet_step_bench: the ResNet-50 training-step ceiling of brrr. Batches are ALREADY ON THE
// DEVICE (synthetic uint8 images and labels, made once), so the number is what the trainer could
// reach if data loading were free; the real-data run (trainer on JPEGs) is compared against it.
//
// One step, as the trainer does it: normalise the uint8 batch on the device, forward under
// autocast (bf16 by default; TF32 for what stays fp32), cross-entropy, backward, global-norm clip,
// brrr's fused AdamW, zero_grad. Optionally channels-last weights and inputs; the model with
// model.fused false (mode `eager`: BatchNorm2d, add, relu) and auto (mode `fused`:
// ops::batch_norm_act). Host syncs only at the ends of the timed window.
//
//   bench_resnet_step_bench --batches 64,256 --steps 30 --warmup 10 --channels-last both
// Prints CSV `impl,mode,batch,channels_last,images_per_s,step_ms` (bench/torch_resnet_step.py
// prints the same columns for PyTorch).
#include <fmt/format.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_main.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "core/precision.h"
#include "models/registry.h"
#include "trainer/optim/grad_clip.h"
#include "trainer/optim/optimizer.h"

namespace {

using brrr::UsageError;

struct Args {
  std::vector<int64_t> batches = {64, 256};
  int64_t steps = 30;
  int64_t warmup = 10;
  std::vector<bool> channels_last = {false, true};
  std::vector<bool> fused = {false, true};  // model.fused false / auto
  std::string precision = "bf16";
  int64_t num_classes = 12;
  int64_t image_size = 224;
  double clip = 1.0;
  bool cudnn_benchmark = true;
  std::string device = "auto";
  std::string csv;
};

std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    try {
      size_t used = 0;
      out.push_back(std::stoll(item, &used));
      if (used != item.size() || out.back() < 1) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw UsageError(fmt::format("{} {}: '{}' is not a positive integer", flag, text, item));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// true, false or both -> the values to run.
std::vector<bool> parse_choices(const std::string& flag, const std::string& value) {
  if (value == "both") return {false, true};
  if (value == "true" || value == "false") return {value == "true"};
  throw UsageError(fmt::format("{} {}: expected true, false or both", flag, value));
}

int64_t parse_int(const std::string& flag, const std::string& text) {
  const auto values = parse_int_list(flag, text);
  if (values.size() != 1) throw UsageError(fmt::format("{} {}: expected one integer", flag, text));
  return values[0];
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      throw UsageError(
          "usage: bench_resnet_step_bench [--batches 64,256] [--steps 30] [--warmup 10] "
          "[--channels-last true|false|both] [--fused true|false|both] "
          "[--precision bf16|fp16|tf32|fp32] "
          "[--num-classes 12] [--image-size 224] [--clip 1.0] [--cudnn-benchmark true|false] "
          "[--device auto|cpu|cuda] [--csv PATH]");
    }
    if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value (see --help)", flag));
    const std::string value = argv[++i];
    if (flag == "--batches") {
      a.batches = parse_int_list(flag, value);
    } else if (flag == "--steps") {
      a.steps = parse_int(flag, value);
    } else if (flag == "--warmup") {
      a.warmup = parse_int(flag, value);
    } else if (flag == "--channels-last") {
      a.channels_last = parse_choices(flag, value);
    } else if (flag == "--fused") {
      a.fused = parse_choices(flag, value);
    } else if (flag == "--precision") {
      brrr::parse_precision(value);  // validates
      a.precision = value;
    } else if (flag == "--num-classes") {
      a.num_classes = parse_int(flag, value);
    } else if (flag == "--image-size") {
      a.image_size = parse_int(flag, value);
    } else if (flag == "--clip") {
      a.clip = std::stod(value);
    } else if (flag == "--cudnn-benchmark") {
      a.cudnn_benchmark = value == "true";
    } else if (flag == "--device") {
      a.device = value;
    } else if (flag == "--csv") {
      a.csv = value;
    } else {
      throw UsageError(fmt::format("unknown flag {} (see --help)", flag));
    }
  }
  return a;
}

struct Result {
  double images_per_s;
  double step_ms;
};

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

Result run_one(const Args& a, int64_t batch, bool channels_last, bool fused,
               const c10::Device& device) {
  torch::manual_seed(0);
  brrr::ModelOptions mo;
  mo.name = "resnet50";
  mo.num_classes = a.num_classes;
  mo.in_channels = 3;
  mo.image_size = a.image_size;
  mo.fused = fused ? "auto" : "false";
  auto model = brrr::make_model(mo);
  model->to(device);
  const auto memory_format =
      channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  if (channels_last) {
    for (auto& p : model->parameters()) {
      if (p.dim() == 4) p.set_data(p.data().contiguous(memory_format));
    }
  }
  brrr::OptimOptions oo;
  oo.name = "adamw";
  oo.lr = 1e-3;
  oo.weight_decay = 0.05;
  oo.fused = device.is_cuda() ? "true" : "auto";
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value());
  auto optimizer = brrr::make_optimizer(oo, named, device);
  const auto params = model->parameters();

  const auto u8 = torch::TensorOptions().dtype(torch::kUInt8).device(device);
  const at::Tensor images = torch::randint(0, 256, {batch, 3, a.image_size, a.image_size}, u8);
  const at::Tensor labels = torch::randint(
      0, a.num_classes, {batch}, torch::TensorOptions().dtype(torch::kLong).device(device));
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  const at::Tensor mean =
      torch::tensor({0.485 * 255, 0.456 * 255, 0.406 * 255}, f32).view({1, 3, 1, 1});
  const at::Tensor std =
      torch::tensor({0.229 * 255, 0.224 * 255, 0.225 * 255}, f32).view({1, 3, 1, 1});
  const brrr::Precision precision = brrr::parse_precision(a.precision);

  auto step = [&] {
    const at::Tensor x =
        ((images.to(torch::kFloat) - mean) / std).contiguous(memory_format);  // (B, 3, H, W)
    at::Tensor loss;
    {
      brrr::AutocastGuard autocast(precision, device);
      loss = torch::cross_entropy_loss(model->forward(x), labels);
    }
    loss.backward();
    if (a.clip > 0) brrr::clip_grad_norm(params, a.clip);
    optimizer->step();
    optimizer->zero_grad();
  };
  for (int64_t i = 0; i < a.warmup; ++i) step();
  synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < a.steps; ++i) step();
  synchronize(device);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {static_cast<double>(batch * a.steps) / seconds,
          seconds / static_cast<double>(a.steps) * 1e3};
}

}  // namespace

int main(int argc, char** argv) {
  return brrr::bench::run_main("bench_resnet_step_bench", [&] {
    const Args a = parse_args(argc, argv);
    const c10::Device device = brrr::resolve_device(a.device);
    brrr::set_tf32(true);
    at::globalContext().setBenchmarkCuDNN(a.cudnn_benchmark);
    brrr::log::info("resnet50 step ceiling on {} ({}), precision {}, cudnn.benchmark {}",
                    brrr::device_name(device), device.str(), a.precision, a.cudnn_benchmark);
    std::string csv = "impl,mode,batch,channels_last,images_per_s,step_ms\n";
    for (bool cl : a.channels_last) {
      for (int64_t batch : a.batches) {
        for (bool fused : a.fused) {
          const Result r = run_one(a, batch, cl, fused, device);
          const char* mode = fused ? "fused" : "eager";
          brrr::log::info("brrr {} batch {} channels_last {}: {:.1f} images/s, {:.2f} ms/step",
                          mode, batch, cl, r.images_per_s, r.step_ms);
          csv += fmt::format("brrr,{},{},{},{:.1f},{:.2f}\n", mode, batch, cl ? 1 : 0,
                             r.images_per_s, r.step_ms);
        }
      }
    }
    brrr::bench::emit_csv(csv, a.csv);
  });
}
