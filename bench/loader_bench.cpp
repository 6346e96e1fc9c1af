// bench_loader_bench: images/s of brrr's DataLoader over an image folder with ImageNet-style
// augmentation, and host-to-device GB/s from the page-locked batch ring vs pageable memory.
//
// Loader: ImageFolderDataset (JPEG region decode at the smallest sufficient DCT scale) with
// random_resized_crop 224 + horizontal_flip, uint8 (B, 3, 224, 224) batches, shuffle, drop_last,
// persistent workers, prefetch_factor 2. Measured end to end: images in batches handed to the
// caller by next() per second, over --batches batches after --warmup (worker start-up is inside
// the warm-up); epochs are chained when the folder is smaller than warmup + batches.
// Copy: one batch of --copy-batch images taken from a pinned loader (a view of a ring slot), copied
// to the device --copy-repeats times with non_blocking=true, timed with device events; then the
// same bytes from an ordinary (pageable) CPU tensor.
//
//   bench_loader_bench --root data_cache/photos --workers 0,1,2,4,8,16 --batch 64
//       --batches 50 --warmup 10 [--pin-memory auto|true|false] [--csv brrr_loader.csv]
// Prints CSV `impl,metric,workers,batch,value,unit` (bench/torch_loader_bench.py: same columns).
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_main.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "data/data_loader.h"
#include "data/image_folder.h"

namespace {

using brrr::UsageError;

struct Args {
  std::string root = "data_cache/photos";
  std::vector<int64_t> workers = {0, 1, 2, 4, 8, 16};
  int64_t batch = 64;
  int64_t batches = 50;
  int64_t warmup = 10;
  int64_t size = 224;
  std::string pin_memory = "auto";
  bool region_decode = true;
  int64_t copy_batch = 256;
  int64_t copy_repeats = 20;
  std::string csv;
};

std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text, int64_t min) {
  std::vector<int64_t> out;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    try {
      size_t used = 0;
      out.push_back(std::stoll(item, &used));
      if (used != item.size() || out.back() < min) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw UsageError(fmt::format("{} {}: '{}' is not an integer >= {}", flag, text, item, min));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int64_t parse_int(const std::string& flag, const std::string& text, int64_t min) {
  const auto values = parse_int_list(flag, text, min);
  if (values.size() != 1) throw UsageError(fmt::format("{} {}: expected one integer", flag, text));
  return values[0];
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      throw UsageError(
          "usage: bench_loader_bench [--root data_cache/photos] [--workers 0,1,2,4,8,16] "
          "[--batch 64] [--batches 50] [--warmup 10] [--size 224] [--pin-memory auto|true|false] "
          "[--region-decode true|false] [--copy-batch 256] [--copy-repeats 20] [--csv PATH]");
    }
    if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value (see --help)", flag));
    const std::string v = argv[++i];
    if (flag == "--root")
      a.root = v;
    else if (flag == "--workers")
      a.workers = parse_int_list(flag, v, 0);
    else if (flag == "--batch")
      a.batch = parse_int(flag, v, 1);
    else if (flag == "--batches")
      a.batches = parse_int(flag, v, 1);
    else if (flag == "--warmup")
      a.warmup = parse_int(flag, v, 1);
    else if (flag == "--size")
      a.size = parse_int(flag, v, 1);
    else if (flag == "--pin-memory")
      a.pin_memory = v;
    else if (flag == "--region-decode")
      a.region_decode = v == "true";
    else if (flag == "--copy-batch")
      a.copy_batch = parse_int(flag, v, 1);
    else if (flag == "--copy-repeats")
      a.copy_repeats = parse_int(flag, v, 1);
    else if (flag == "--csv")
      a.csv = v;
    else
      throw UsageError(fmt::format("unknown flag {} (see --help)", flag));
  }
  if (a.pin_memory != "auto" && a.pin_memory != "true" && a.pin_memory != "false") {
    throw UsageError(fmt::format("--pin-memory {}: expected auto, true or false", a.pin_memory));
  }
  return a;
}

brrr::DataLoaderOptions loader_options(int64_t batch, int64_t workers, bool pin,
                                       c10::Device device) {
  return brrr::DataLoaderOptions()
      .batch_size(batch)
      .shuffle(true)
      .num_workers(workers)
      .pin_memory(pin)
      .prefetch_factor(2)
      .persistent_workers(true)
      .drop_last(true)
      .seed(0)
      .device(device);
}

// Images/s over `batches` batches handed out after `warmup` batches.
double images_per_s(const Args& a, const brrr::DatasetPtr& dataset, int64_t workers, bool pin,
                    c10::Device device) {
  brrr::DataLoader loader(dataset, loader_options(a.batch, workers, pin, device));
  int64_t epoch = 0;
  loader.start_epoch(epoch);
  auto next = [&] {
    for (;;) {
      std::optional<brrr::Batch> b = loader.next();
      if (b) return b->at("image").size(0);  // the batch (a ring slot) is released here
      loader.start_epoch(++epoch);
    }
  };
  for (int64_t i = 0; i < a.warmup; ++i) next();
  const auto t0 = std::chrono::steady_clock::now();
  int64_t images = 0;
  for (int64_t i = 0; i < a.batches; ++i) images += next();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(images) / s;
}

// GB/s (1e9 bytes) of `repeats` non-blocking copies of `src` into `dst`, timed with device events
// on the current stream.
double h2d_gbps(const at::Tensor& src, at::Tensor& dst, int64_t repeats) {
  const c10::Device device = dst.device();
  c10::impl::VirtualGuardImpl guard(device.type());
  const c10::Stream stream = guard.getStream(device);
  for (int i = 0; i < 2; ++i) dst.copy_(src, /*non_blocking=*/true);
  c10::Event start(device.type(), c10::EventFlag::BACKEND_DEFAULT);  // timing enabled
  c10::Event end(device.type(), c10::EventFlag::BACKEND_DEFAULT);
  start.record(stream);
  for (int64_t i = 0; i < repeats; ++i) dst.copy_(src, /*non_blocking=*/true);
  end.record(stream);
  end.synchronize();
  const double ms = start.elapsedTime(end);
  return static_cast<double>(src.nbytes()) * static_cast<double>(repeats) / (ms * 1e-3) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  return brrr::bench::run_main("bench_loader_bench", [&] {
    const Args a = parse_args(argc, argv);
    const c10::Device device = brrr::resolve_device("auto");
    const bool pin = a.pin_memory == "auto" ? device.is_cuda() : a.pin_memory == "true";
    std::vector<brrr::TransformOptions> transforms(2);
    transforms[0].name = "random_resized_crop";
    transforms[0].size = {a.size, a.size};
    transforms[1].name = "horizontal_flip";
    auto dataset =
        std::make_shared<const brrr::ImageFolderDataset>(a.root, transforms, a.region_decode);
    if (dataset->size() < a.batch) {
      throw brrr::DataError(fmt::format("{} holds {} images, fewer than --batch {}", a.root,
                                        dataset->size(), a.batch));
    }
    brrr::log::info("{}; batch {}, pin_memory {}, region decode {}, device {}", dataset->describe(),
                    a.batch, pin, a.region_decode, brrr::device_name(device));

    std::string csv = "impl,metric,workers,batch,value,unit\n";
    for (int64_t w : a.workers) {
      const double ips = images_per_s(a, dataset, w, pin, device);
      brrr::log::info("workers {:2d}: {:9.1f} images/s", w, ips);
      csv += fmt::format("brrr,images_per_s,{},{},{:.3f},images/s\n", w, a.batch, ips);
    }
    if (device.is_cuda()) {
      // One batch straight from the page-locked ring (the prefetcher's DMA source).
      brrr::DataLoader loader(dataset, loader_options(a.copy_batch, 4, true, device));
      std::optional<brrr::Batch> batch = loader.next();
      if (!batch) throw brrr::DataError(fmt::format("{}: no batch of {}", a.root, a.copy_batch));
      const at::Tensor ring = batch->at("image");  // (B, 3, H, W) uint8, view of a pinned slot
      if (!loader.pinned() || !ring.is_pinned()) {
        brrr::log::warn(
            "the batch ring is not page-locked: the 'pinned' row measures pageable memory");
      }
      at::Tensor dst = at::empty_like(ring, ring.options().device(device));
      const double pinned = h2d_gbps(ring, dst, a.copy_repeats);
      const at::Tensor pageable = ring.clone();
      const double paged = h2d_gbps(pageable, dst, a.copy_repeats);
      brrr::log::info("H2D of {} MB: pinned ring {:.2f} GB/s, pageable {:.2f} GB/s",
                      ring.nbytes() / 1e6, pinned, paged);
      csv += fmt::format("brrr,h2d_pinned_gbps,0,{},{:.3f},GB/s\n", a.copy_batch, pinned);
      csv += fmt::format("brrr,h2d_pageable_gbps,0,{},{:.3f},GB/s\n", a.copy_batch, paged);
    }
    brrr::bench::emit_csv(csv, a.csv);
  });
}
