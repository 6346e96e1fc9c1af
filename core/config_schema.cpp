#include "core/config_schema.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/yaml_util.h"

namespace brrr::detail {

// --- The tables -------------------------------------------------------------------------------

namespace {

// The kind of a member follows from its C++ type; any other type fails to compile.
template <typename T>
constexpr Kind kind_of() {
  if constexpr (std::is_same_v<T, int64_t>) return Kind::kInt;
  if constexpr (std::is_same_v<T, double>) return Kind::kDouble;
  if constexpr (std::is_same_v<T, bool>) return Kind::kBool;
  if constexpr (std::is_same_v<T, std::string>) return Kind::kString;
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) return Kind::kIntList;
  if constexpr (std::is_same_v<T, std::vector<double>>) return Kind::kDoubleList;
  if constexpr (std::is_same_v<T, std::vector<TransformOptions>>) return Kind::kTransforms;
  if constexpr (std::is_same_v<T, OptionMap>) return Kind::kOptions;
}

template <typename Member>
Field make_field(const char* key, void* (*get)(void*), Rules rules, const char* doc) {
  constexpr Kind kind = kind_of<Member>();  // constant-evaluated: an unknown type cannot compile
  return Field{key, kind, get, std::move(rules), doc};
}

// The key path is spelled once: it is both the YAML key and the member path, so a row cannot
// point at the wrong member.
// clang-format off
#define BRRR_FIELD(ROOT, path, rules, doc)                                                  \
  make_field<decltype(std::declval<ROOT&>().path)>(                                         \
      #path, [](void* root) -> void* { return &static_cast<ROOT*>(root)->path; }, rules, doc)
// clang-format on
#define BRRR_CFG(path, rules, doc) BRRR_FIELD(ExperimentConfig, path, rules, doc)

// DatasetOptions appears twice (data, data.val); only the rules of a few rows differ.
#define BRRR_DATASET_FIELDS(P, DATASET, IN)                                                      \
  BRRR_CFG(P.dataset, DATASET,                                                                   \
           "fashion_mnist, image_folder, token_file, csv, or one given to register_dataset."),   \
      BRRR_CFG(P.path, R, "File or folder of the data."),                                        \
      BRRR_CFG(P.split, R.not_empty(), "fashion_mnist: train or test."),                         \
      BRRR_CFG(P.batch_size, IN.ge(0).auto_means(0),                                             \
               "Micro-batch size per device; auto = largest that fits."),                        \
      BRRR_CFG(P.transforms, R, "Image transforms, in order."),                                  \
      BRRR_CFG(P.mean, IN, "Per-channel normalisation mean (empty = x/255)."),                   \
      BRRR_CFG(P.std, IN.gt(0), "Per-channel normalisation std."),                               \
      BRRR_CFG(P.block_size, IN.ge(0), "token_file: tokens per example; 0 = model.block_size."), \
      BRRR_CFG(P.token_dtype, IN.one_of({"uint16", "uint32"}), "token_file: token width."),      \
      BRRR_CFG(P.windows, R.one_of({"random", "sequential"}), "token_file: window placement."),  \
      BRRR_CFG(P.label_column, R, "csv: label column (negative counts from the end)."),          \
      BRRR_CFG(P.header, R, "csv: the first row is a header."),                                  \
      BRRR_CFG(P.limit, R.ge(0), "Use only the first `limit` examples (0 = all)."),              \
      BRRR_CFG(P.options, IN, "Options of a dataset given to brrr::register_dataset.")

const std::vector<std::string> kMinMax = {"min", "max"};

std::vector<Field> make_config_fields() {
  const Rules R;
  return {
      BRRR_CFG(run.name, R.not_empty(), "Run name; the run directory is <output_dir>/<name>/."),
      BRRR_CFG(run.output_dir, R.not_empty(), "Parent folder of run directories."),
      BRRR_CFG(run.seed, R.ge(0), "Seed of init, sample order, augmentation and dropout."),
      BRRR_CFG(run.device, R.device_name(), "auto, cpu, cuda or cuda:N."),
      BRRR_CFG(run.num_threads, R.ge(0), "Intra-op CPU threads; 0 = libtorch's default."),
      BRRR_CFG(run.overwrite, R,
               "Starting afresh replaces an earlier run in the run directory (else refused)."),
      BRRR_CFG(run.strict_resume, R,
               "Resuming with another data.batch_size than the checkpoint's is an error."),
      BRRR_CFG(run.dist_timeout_s, R.gt(0),
               "Data-parallel: seconds a rank waits for the others before it fails."),

      BRRR_CFG(model.name, R.must_be_set(),
               "mlp, convnet, resnet18, resnet50, gpt, or one given to brrr::register_model."),
      BRRR_CFG(model.num_classes, R.ge(1), "Classifier outputs."),
      BRRR_CFG(model.in_channels, R.ge(1), "Input image channels."),
      BRRR_CFG(model.image_size, R.ge(1), "Input image side in pixels."),
      BRRR_CFG(model.hidden_sizes, R.ge(1), "mlp: hidden layer widths."),
      BRRR_CFG(model.channels, R.ge(1), "convnet: conv widths of the blocks."),
      BRRR_CFG(model.stem, R.one_of({"imagenet", "small"}), "resnet: stem kind."),
      BRRR_CFG(model.dropout, R.ge(0).lt(1), "Dropout probability."),
      BRRR_CFG(model.n_layer, R.ge(1), "gpt: transformer blocks."),
      BRRR_CFG(model.n_head, R.ge(1), "gpt: attention heads."),
      BRRR_CFG(model.n_embd, R.ge(1), "gpt: embedding width (a multiple of n_head)."),
      BRRR_CFG(model.block_size, R.ge(1), "gpt: context length in tokens."),
      BRRR_CFG(model.vocab_size, R.ge(1), "gpt: vocabulary size."),
      BRRR_CFG(model.bias, R, "gpt: biases in Linear and LayerNorm."),
      BRRR_CFG(model.tie_embeddings, R, "gpt: output head shares the token embedding."),
      BRRR_CFG(model.channels_last, R, "conv models on CUDA: NHWC weights and inputs."),
      BRRR_CFG(model.fused, R.one_of({"auto", "true", "false"}),
               "Fused ops (brrr::ops): auto, true, or false for the unfused ATen path."),
      BRRR_CFG(model.attention, R.one_of({"auto", "flash", "cudnn", "efficient", "math"}),
               "gpt: attention backend."),
      BRRR_CFG(model.head_chunk_rows, R.ge(0),
               "gpt fused: logits rows the head + loss holds at once; 0 = all."),
      BRRR_CFG(
          model.init_from, R,
          "Weights to start from: safetensors, torch.save(state_dict), brrr checkpoint, HF GPT-2."),
      BRRR_CFG(model.init_strict, R, "init_from: every key must match both ways."),
      BRRR_CFG(model.options, R, "Options of a model given to brrr::register_model."),

      BRRR_DATASET_FIELDS(data, R.must_be_set(), R),
      BRRR_CFG(data.num_workers, R.ge(-1).auto_means(-1),
               "Loader processes; 0 = in-process; auto."),
      BRRR_CFG(data.pin_memory, R, "Page-lock the batch ring (CUDA only)."),
      BRRR_CFG(data.prefetch_factor, R.ge(1), "Batches in flight per worker."),
      BRRR_CFG(data.persistent_workers, R,
               "Keep workers across epochs; they start the next one early."),
      BRRR_CFG(data.shuffle, R, "Reshuffle every epoch."),
      BRRR_CFG(data.drop_last, R, "Drop the last incomplete batch."),
      BRRR_CFG(data.timeout, R.ge(0), "Seconds to wait for a batch; 0 = forever."),
      BRRR_CFG(data.stall_warning_s, R.ge(0),
               "A longer wait for a batch logs the batch and worker it waits for; 0 = never."),
      BRRR_DATASET_FIELDS(data.val, R, R.inherit()),

      BRRR_CFG(optim.name, R.one_of({"sgd", "adam", "adamw"}), "Optimizer."),
      BRRR_CFG(optim.lr, R.gt(0), "Peak learning rate."),
      BRRR_CFG(optim.weight_decay, R.ge(0), "Weight decay (decoupled for adamw)."),
      BRRR_CFG(optim.betas, R.ge(0).lt(1), "Adam betas (two values)."),
      BRRR_CFG(optim.eps, R.gt(0), "Adam epsilon."),
      BRRR_CFG(optim.momentum, R.ge(0), "SGD momentum."),
      BRRR_CFG(optim.nesterov, R, "SGD Nesterov momentum (needs momentum > 0)."),
      BRRR_CFG(optim.fused, R.one_of({"auto", "true", "false"}), "Fused kernels: auto (on CUDA)."),
      BRRR_CFG(optim.no_decay_1d, R, "No weight decay on 1-D parameters."),

      BRRR_CFG(schedule.name, R.one_of({"constant", "cosine", "linear", "step", "wsd", "plateau"}),
               "Learning-rate schedule."),
      BRRR_CFG(schedule.warmup_steps, R.ge(0), "Linear warm-up steps."),
      BRRR_CFG(schedule.min_lr_ratio, R.ge(0).le(1), "Final lr as a fraction of lr."),
      BRRR_CFG(schedule.step_size, R.ge(1), "step: steps between decays."),
      BRRR_CFG(schedule.gamma, R.gt(0).le(1), "step: decay factor."),
      BRRR_CFG(schedule.decay_ratio, R.ge(0).le(1), "wsd: fraction of steps spent decaying."),
      BRRR_CFG(schedule.metric, R.not_empty(), "plateau: eval metric watched."),
      BRRR_CFG(schedule.mode, R.one_of(kMinMax), "plateau: lower or higher is better."),
      BRRR_CFG(schedule.patience, R.ge(0), "plateau: evaluations without improvement."),
      BRRR_CFG(schedule.factor, R.gt(0).lt(1), "plateau: lr factor."),
      BRRR_CFG(schedule.threshold, R.ge(0), "plateau: relative improvement threshold."),

      BRRR_CFG(train.max_steps, R.ge(0), "Optimizer steps (or set max_epochs)."),
      BRRR_CFG(train.max_epochs, R.ge(0),
               "Epochs instead of max_steps: max_epochs x floor(batches/epoch / accum) steps."),
      BRRR_CFG(train.grad_accum_steps, R.ge(1), "Micro-batches per optimizer step."),
      BRRR_CFG(train.max_grad_norm, R.ge(0), "Gradient-norm clip; 0 = off."),
      BRRR_CFG(train.precision, R.one_of({"fp32", "tf32", "bf16", "fp16"}), "Precision policy."),
      BRRR_CFG(train.cuda_graph, R.one_of({"auto", "true", "false"}),
               "Replay each optimizer step as one CUDA graph: auto (CUDA, when capturable)."),
      BRRR_CFG(train.deterministic, R,
               "Bitwise-reproducible runs: deterministic algorithms only (slower)."),
      BRRR_CFG(train.log_every, R.ge(1), "Steps between metric records."),
      BRRR_CFG(train.eval_every, R.ge(0), "Steps between evaluations; 0 = only at the end."),
      BRRR_CFG(train.eval_batches, R.ge(0), "Batches per evaluation; 0 = all."),
      BRRR_CFG(train.checkpoint_every, R.ge(0), "Steps between checkpoints; 0 = only at the end."),
      BRRR_CFG(train.keep_checkpoints, R.ge(1), "Step checkpoints kept."),
      BRRR_CFG(train.best_metric, R, "Eval metric selecting the best checkpoint (empty = none)."),
      BRRR_CFG(train.best_mode, R.one_of(kMinMax), "Lower or higher best_metric is better."),
      BRRR_CFG(train.ema_decay, R.ge(0).lt(1), "EMA decay of the weights; 0 = off."),
      BRRR_CFG(train.early_stopping.patience, R.ge(0), "Evaluations without improvement; 0 = off."),
      BRRR_CFG(train.early_stopping.metric, R.not_empty(), "Eval metric watched."),
      BRRR_CFG(train.early_stopping.mode, R.one_of(kMinMax), "Lower or higher is better."),
      BRRR_CFG(train.early_stopping.min_delta, R.ge(0), "Smallest change that counts."),
      BRRR_CFG(train.profile.start_step, R.ge(0), "First profiled step."),
      BRRR_CFG(train.profile.steps, R.ge(0), "Profiled steps; 0 = off."),
      BRRR_CFG(train.profile.memory, R, "Also trace every allocation and free."),
      BRRR_CFG(train.fp16.init_scale, R.gt(0), "Initial loss scale."),
      BRRR_CFG(train.fp16.growth_factor, R.gt(1), "Scale growth factor."),
      BRRR_CFG(train.fp16.backoff_factor, R.gt(0).lt(1), "Scale back-off factor."),
      BRRR_CFG(train.fp16.growth_interval, R.ge(1), "Finite steps before growing the scale."),
  };
}

std::vector<Field> make_transform_fields() {
  const Rules R;
  return {
      BRRR_FIELD(TransformOptions, name,
                 R.must_be_set().one_of({"random_resized_crop", "random_crop", "resize",
                                         "center_crop", "horizontal_flip"}),
                 "Transform kind."),
      BRRR_FIELD(TransformOptions, size, R.ge(1).allow_scalar(), "Output [height, width] or side."),
      BRRR_FIELD(TransformOptions, scale, R.gt(0).le(1), "random_resized_crop: area range."),
      BRRR_FIELD(TransformOptions, ratio, R.gt(0), "random_resized_crop: aspect-ratio range."),
      BRRR_FIELD(TransformOptions, padding, R.ge(0), "random_crop: zero padding per side."),
      BRRR_FIELD(TransformOptions, p, R.ge(0).le(1), "horizontal_flip: probability."),
  };
}

#undef BRRR_DATASET_FIELDS
#undef BRRR_CFG
#undef BRRR_FIELD

const std::set<std::string>& sections() {
  static const std::set<std::string> all = [] {
    std::set<std::string> s;
    for (const auto& f : config_fields()) {
      for (size_t dot = f.key.find('.'); dot != std::string::npos; dot = f.key.find('.', dot + 1)) {
        s.insert(f.key.substr(0, dot));
      }
    }
    return s;
  }();
  return all;
}

}  // namespace

const std::vector<Field>& config_fields() {
  static const std::vector<Field> fields = make_config_fields();
  return fields;
}

const std::vector<Field>& transform_fields() {
  static const std::vector<Field> fields = make_transform_fields();
  return fields;
}

const Field* find_field(const std::vector<Field>& fields, const std::string& key) {
  for (const auto& f : fields) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

bool is_section(const std::string& path) {
  return sections().count(path) > 0;
}

std::vector<std::string> child_names(const std::string& section) {
  const std::string prefix = section.empty() ? "" : section + ".";
  std::vector<std::string> names;
  for (const auto& f : config_fields()) {
    if (f.key.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = f.key.substr(prefix.size());
    const std::string name = rest.substr(0, rest.find('.'));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kInt:
      return "int";
    case Kind::kDouble:
      return "float";
    case Kind::kBool:
      return "bool";
    case Kind::kString:
      return "string";
    case Kind::kIntList:
      return "[int]";
    case Kind::kDoubleList:
      return "[float]";
    case Kind::kTransforms:
      return "[transform]";
    case Kind::kOptions:
      return "map";
  }
  return "?";
}

const char* kind_description(Kind kind) {
  switch (kind) {
    case Kind::kInt:
      return "an integer";
    case Kind::kDouble:
      return "a number";
    case Kind::kBool:
      return "a boolean (true or false)";
    case Kind::kString:
      return "a string";
    case Kind::kIntList:
      return "a list of integers";
    case Kind::kDoubleList:
      return "a list of numbers";
    case Kind::kTransforms:
      return "a list of transforms ({name: ..., ...})";
    case Kind::kOptions:
      return "a mapping of options ({name: value, ...})";
  }
  return "?";
}

// --- Rules and values ------------------------------------------------------------------------

namespace {

[[noreturn]] void fail(const Where& where, const std::string& key, const std::string& what) {
  throw ConfigError(where.message(key, what));
}

bool is_device_name(const std::string& s) {
  static const std::regex kDevice("auto|cpu|cuda|cuda:[0-9]+");
  return std::regex_match(s, kDevice);
}

std::string format_bound(double v) {
  return fmt::format("{}", v);
}

void check_number(const Rules& r, double v, const std::string& shown, const std::string& key,
                  const Where& where) {
  // Written as "not inside" so that NaN fails every bound.
  const bool lo_ok = !r.lo || (r.lo_open ? v > *r.lo : v >= *r.lo);
  const bool hi_ok = !r.hi || (r.hi_open ? v < *r.hi : v <= *r.hi);
  if (lo_ok && hi_ok) return;
  std::string range;
  if (r.lo && r.hi) {
    range = fmt::format("in {}{}, {}{}", r.lo_open ? "(" : "[", format_bound(*r.lo),
                        format_bound(*r.hi), r.hi_open ? ")" : "]");
  } else if (r.lo) {
    range = fmt::format("{} {}", r.lo_open ? ">" : ">=", format_bound(*r.lo));
  } else {
    range = fmt::format("{} {}", r.hi_open ? "<" : "<=", format_bound(*r.hi));
  }
  fail(where, key, fmt::format("must be {}, got {}", range, shown));
}

}  // namespace

void check_value(const Field& field, const void* value, const std::string& key,
                 const Where& where) {
  const Rules& r = field.rules;
  switch (field.kind) {
    case Kind::kInt: {
      const int64_t v = *static_cast<const int64_t*>(value);
      check_number(r, static_cast<double>(v), std::to_string(v), key, where);
      break;
    }
    case Kind::kDouble: {
      const double v = *static_cast<const double*>(value);
      if (!std::isfinite(v))
        fail(where, key, fmt::format("must be a finite number, got {}", format_double(v)));
      check_number(r, v, format_double(v), key, where);
      break;
    }
    case Kind::kBool:
      break;
    case Kind::kString: {
      const auto& s = *static_cast<const std::string*>(value);
      if (s.empty()) {
        // An unset required key is reported by validate(), which knows which file lacks it.
        if (r.non_empty) fail(where, key, "must not be empty");
        break;
      }
      if (!r.choices.empty() &&
          std::find(r.choices.begin(), r.choices.end(), s) == r.choices.end()) {
        std::string list;
        for (const auto& c : r.choices) list += (list.empty() ? "" : ", ") + c;
        fail(where, key, fmt::format("expected one of {}, got '{}'", list, s));
      }
      if (r.device && !is_device_name(s)) {
        fail(where, key, fmt::format("expected auto, cpu, cuda or cuda:N, got '{}'", s));
      }
      break;
    }
    case Kind::kIntList: {
      const auto& v = *static_cast<const std::vector<int64_t>*>(value);
      for (size_t i = 0; i < v.size(); ++i) {
        check_number(r, static_cast<double>(v[i]), std::to_string(v[i]),
                     fmt::format("{}[{}]", key, i), where);
      }
      break;
    }
    case Kind::kDoubleList: {
      const auto& v = *static_cast<const std::vector<double>*>(value);
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string item = fmt::format("{}[{}]", key, i);
        if (!std::isfinite(v[i])) {
          fail(where, item, fmt::format("must be a finite number, got {}", format_double(v[i])));
        }
        check_number(r, v[i], format_double(v[i]), item, where);
      }
      break;
    }
    case Kind::kTransforms: {
      const auto& v = *static_cast<const std::vector<TransformOptions>*>(value);
      for (size_t i = 0; i < v.size(); ++i) {
        for (const auto& tf : transform_fields()) {
          check_value(tf, tf.in(v[i]), fmt::format("{}[{}].{}", key, i, tf.key), where);
        }
      }
      break;
    }
    case Kind::kOptions:
      break;  // typed when its factory reads it
  }
}

bool values_equal(const Field& field, const void* a, const void* b) {
  switch (field.kind) {
    case Kind::kInt:
      return *static_cast<const int64_t*>(a) == *static_cast<const int64_t*>(b);
    case Kind::kDouble:
      return *static_cast<const double*>(a) == *static_cast<const double*>(b);
    case Kind::kBool:
      return *static_cast<const bool*>(a) == *static_cast<const bool*>(b);
    case Kind::kString:
      return *static_cast<const std::string*>(a) == *static_cast<const std::string*>(b);
    case Kind::kIntList:
      return *static_cast<const std::vector<int64_t>*>(a) ==
             *static_cast<const std::vector<int64_t>*>(b);
    case Kind::kDoubleList:
      return *static_cast<const std::vector<double>*>(a) ==
             *static_cast<const std::vector<double>*>(b);
    case Kind::kTransforms:
      return *static_cast<const std::vector<TransformOptions>*>(a) ==
             *static_cast<const std::vector<TransformOptions>*>(b);
    case Kind::kOptions:
      return *static_cast<const OptionMap*>(a) == *static_cast<const OptionMap*>(b);
  }
  return false;
}

void copy_value(const Field& field, void* dst, const void* src) {
  switch (field.kind) {
    case Kind::kInt:
      *static_cast<int64_t*>(dst) = *static_cast<const int64_t*>(src);
      break;
    case Kind::kDouble:
      *static_cast<double*>(dst) = *static_cast<const double*>(src);
      break;
    case Kind::kBool:
      *static_cast<bool*>(dst) = *static_cast<const bool*>(src);
      break;
    case Kind::kString:
      *static_cast<std::string*>(dst) = *static_cast<const std::string*>(src);
      break;
    case Kind::kIntList:
      *static_cast<std::vector<int64_t>*>(dst) = *static_cast<const std::vector<int64_t>*>(src);
      break;
    case Kind::kDoubleList:
      *static_cast<std::vector<double>*>(dst) = *static_cast<const std::vector<double>*>(src);
      break;
    case Kind::kTransforms:
      *static_cast<std::vector<TransformOptions>*>(dst) =
          *static_cast<const std::vector<TransformOptions>*>(src);
      break;
    case Kind::kOptions:
      *static_cast<OptionMap*>(dst) = *static_cast<const OptionMap*>(src);
      break;
  }
}

}  // namespace brrr::detail
