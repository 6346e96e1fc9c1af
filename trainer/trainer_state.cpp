// Trainer: checkpoints and resume. A checkpoint holds the weights (parameters and buffers), the
// optimizer, schedule, scaler and RNG states, every callback's state, the TrainCounters and the
// resolved config.
#include <torch/serialize/archive.h>

#include <algorithm>

#include "core/checkpoint_io.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng_state.h"
#include "models/model.h"
#include "trainer/optim/grad_scaler.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/optim/optimizer.h"
#include "trainer/run_outputs.h"
#include "trainer/trainer.h"

namespace brrr {

void Trainer::save_checkpoint(bool best) {
  if (!outputs_) throw Error("Trainer::save_checkpoint() called outside fit()");
  auto writer = [this](torch::serialize::OutputArchive& archive) { save_state(archive); };
  if (best) {
    outputs_->save_best(writer);
    return;
  }
  last_checkpoint_ = outputs_->save_checkpoint(counters_.step, writer);
}

void Trainer::save_state(torch::serialize::OutputArchive& archive) {
  c10::Dict<std::string, at::Tensor> weights;
  for (const auto& p : model_->named_parameters())
    weights.insert(p.key(), p.value().detach().cpu());
  for (const auto& b : model_->named_buffers()) weights.insert(b.key(), b.value().detach().cpu());
  archive.write("model", c10::IValue(weights));

  torch::serialize::OutputArchive optimizer, schedule, scaler, rng;
  optimizer_->save(optimizer);
  schedule_->save(schedule);
  scaler_->save(scaler);
  save_rng_state(rng, capture_rng_state());
  archive.write("optimizer", optimizer);
  archive.write("schedule", schedule);
  archive.write("scaler", scaler);
  archive.write("rng", rng);
  for (const auto& cb : callbacks_) {
    torch::serialize::OutputArchive nested;
    cb->save(nested);
    archive.write("callback_" + cb->name(), nested);
  }
  counters_.save(archive);
  archive.write("config", c10::IValue(config_yaml()));
  // The data position (counters_.batches_in_epoch) counts micro-batches of one rank.
  archive.write("world_size", c10::IValue(world_size()));
}

void Trainer::load_state(torch::serialize::InputArchive& archive) {
  c10::IValue weights_value;
  archive.read("model", weights_value);
  const auto weights = weights_value.toGenericDict();
  torch::NoGradGuard no_grad;
  auto restore = [&](const std::string& name, at::Tensor& target) {
    auto it = weights.find(name);
    if (it == weights.end())
      throw CheckpointError(fmt::format("checkpoint has no tensor '{}'", name));
    const at::Tensor value = it->value().toTensor();
    if (value.sizes() != target.sizes()) {
      throw CheckpointError(fmt::format("checkpoint tensor '{}' has shape {}, the model expects {}",
                                        name, c10::str(value.sizes()), c10::str(target.sizes())));
    }
    target.copy_(value);
  };
  for (auto& p : model_->named_parameters()) restore(p.key(), p.value());
  for (auto& b : model_->named_buffers()) restore(b.key(), b.value());

  torch::serialize::InputArchive optimizer, schedule, scaler, rng;
  archive.read("optimizer", optimizer);
  archive.read("schedule", schedule);
  archive.read("scaler", scaler);
  archive.read("rng", rng);
  optimizer_->load(optimizer);
  schedule_->load(schedule);
  scaler_->load(scaler);
  restore_rng_state(load_rng_state(rng));
  for (auto& cb : callbacks_) {
    torch::serialize::InputArchive nested;
    if (archive.try_read("callback_" + cb->name(), nested)) cb->load(nested);
  }
  counters_.load(archive);
  c10::IValue saved_config, saved_world;
  const int64_t saved_world_size =
      archive.try_read("world_size", saved_world) && saved_world.isInt() ? saved_world.toInt() : 1;
  if (archive.try_read("config", saved_config) && saved_config.isString()) {
    check_data_position(saved_config.toStringRef(), saved_world_size);
  }
}

void Trainer::check_data_position(const std::string& saved_yaml, int64_t saved_world_size) {
  int64_t saved_batch = 0;
  try {
    saved_batch = parse_config(saved_yaml, "<the checkpoint's config>").data.batch_size;
  } catch (const ConfigError& e) {  // written by a brrr with other keys: nothing to compare
    log::debug("not comparing with the checkpoint's config: {}", e.what());
    return;
  }
  const int64_t batch = config_.data.batch_size;
  const int64_t ranks = world_size();
  if (saved_batch <= 0 || batch <= 0) return;
  if (saved_batch == batch && saved_world_size == ranks) return;
  // The sample order of an epoch depends on (seed, epoch) only, and the ranks' shards interleave
  // it (rank r takes positions r, r + N, ...), so after k micro-batches of B on each of N ranks
  // the first k B N examples of the epoch are consumed, whatever N. The position carries over in
  // examples; it is exact when those divide by the new batch times the new number of ranks.
  const int64_t examples = counters_.batches_in_epoch * saved_batch * saved_world_size;
  const int64_t per_batch = batch * ranks;
  const bool exact = examples % per_batch == 0;
  std::string what = fmt::format(
      "the checkpoint was written with batch size {} on {} rank(s), this run uses {} "
      "on {}: its data position (batch {} of epoch {}, {} examples in) becomes batch "
      "{}",
      saved_batch, saved_world_size, batch, ranks, counters_.batches_in_epoch, counters_.epoch,
      examples, examples / per_batch);
  if (!exact) what += ", approximate to within one batch";
  if (saved_batch != batch && config_.run.strict_resume) {
    throw ConfigError(config_message(config_, "data.batch_size", what + " (run.strict_resume)"));
  }
  if (exact) {
    log::info("resume: {}", what);
  } else {
    log::warn("resume: {}", what);
  }
  counters_.batches_in_epoch = examples / per_batch;
}

void Trainer::load_checkpoint(const std::string& path) {
  setup();
  CheckpointStore::load(path,
                        [this](torch::serialize::InputArchive& archive) { load_state(archive); });
}

void Trainer::resume_from(const std::string& path) {
  load_checkpoint(path);
  last_checkpoint_ = path;
  const int64_t every = config_.train.log_every;
  const int64_t first_window =
      std::min(every - counters_.step % every, config_.train.max_steps - counters_.step);
  log::info(
      "resumed from {} at step {} (epoch {}, batch {}); the first logging window averages "
      "{} step{} ({}..{})",
      path, counters_.step, counters_.epoch, counters_.batches_in_epoch, first_window,
      first_window == 1 ? "" : "s", counters_.step + 1, counters_.step + first_window);
}

}  // namespace brrr
