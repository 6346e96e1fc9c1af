// Trainer: checkpoints and resume. A checkpoint holds the weights (parameters and buffers), the
// optimizer, schedule, scaler and RNG states, every callback's state, the TrainCounters and the
// resolved config.
#include <torch/serialize/archive.h>

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
  archive.write("config", c10::IValue(to_yaml(config_)));
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
}

void Trainer::resume_from(const std::string& resume) {
  if (resume.empty()) return;
  std::string path = resume;
  if (resume == "auto") {
    const auto latest = outputs_->checkpoints().latest();
    if (!latest) {
      log::info("--resume auto: no checkpoint in {}/checkpoints, starting fresh", run_dir_);
      return;
    }
    path = *latest;
  }
  CheckpointStore::load(path,
                        [this](torch::serialize::InputArchive& archive) { load_state(archive); });
  last_checkpoint_ = path;
  log::info("resumed from {} at step {} (epoch {}, batch {})", path, counters_.step,
            counters_.epoch, counters_.batches_in_epoch);
}

}  // namespace brrr
