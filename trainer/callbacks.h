#pragma once
// Callbacks: behaviour attached to the training loop without copying it. The trainer calls them in
// the order they were added. State that must survive a resume goes through save()/load().
#include <torch/serialize/archive.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace brrr {

class Trainer;
using Metrics = std::map<std::string, double>;

class Callback {
 public:
  virtual ~Callback() = default;
  /// Unique name; also the checkpoint archive key of this callback's state.
  virtual std::string name() const = 0;
  virtual void on_train_start(Trainer& /*trainer*/) {}
  /// After every optimizer step (no host sync should happen here).
  virtual void on_step_end(Trainer& /*trainer*/, int64_t /*step*/) {}
  virtual void on_eval_begin(Trainer& /*trainer*/) {}
  virtual void on_eval_end(Trainer& /*trainer*/, int64_t /*step*/, const Metrics& /*metrics*/) {}
  virtual void on_train_end(Trainer& /*trainer*/) {}
  virtual void save(torch::serialize::OutputArchive& /*archive*/) const {}
  virtual void load(torch::serialize::InputArchive& /*archive*/) {}
};

/// True when `value` improves on `best` by more than min_delta in direction mode ("min"/"max").
bool improves(double value, double best, const std::string& mode, double min_delta = 0.0);

/// Stops training after `patience` evaluations without improvement of `metric`.
class EarlyStopping : public Callback {
 public:
  EarlyStopping(std::string metric, std::string mode, int64_t patience, double min_delta);
  std::string name() const override { return "early_stopping"; }
  void on_eval_end(Trainer& trainer, int64_t step, const Metrics& metrics) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  int64_t bad_evals() const { return bad_evals_; }

 private:
  std::string metric_, mode_;
  int64_t patience_;
  double min_delta_;
  double best_;
  int64_t bad_evals_ = 0;
};

/// Exponential moving average of the weights (float32 shadow copies, updated with one multi-tensor
/// lerp per step, on the device). Evaluation runs with the EMA weights swapped in.
class Ema : public Callback {
 public:
  explicit Ema(double decay);
  std::string name() const override { return "ema"; }
  void on_train_start(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, int64_t step) override;
  void on_eval_begin(Trainer& trainer) override;
  void on_eval_end(Trainer& trainer, int64_t step, const Metrics& metrics) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  const std::vector<at::Tensor>& shadow() const { return shadow_; }

 private:
  double decay_;
  std::vector<at::Tensor> params_;  // the live parameters (aliases)
  std::vector<at::Tensor> shadow_;  // EMA values, same shapes
  std::vector<at::Tensor> backup_;  // live values while the EMA is swapped in
};

/// Saves `best.pt` whenever the eval metric improves.
class BestCheckpoint : public Callback {
 public:
  BestCheckpoint(std::string metric, std::string mode);
  std::string name() const override { return "best_checkpoint"; }
  void on_eval_end(Trainer& trainer, int64_t step, const Metrics& metrics) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  double best() const { return best_; }

 private:
  std::string metric_, mode_;
  double best_;
};

}  // namespace brrr
