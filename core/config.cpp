// Parses, checks and prints ExperimentConfig by walking the schema table (core/config_schema.h).
//
// Loading order, which every message and default relies on:
//   base files (deepest first) -> the file itself -> --set overrides -> dependent defaults
//   -> validate.
// Each layer writes only the keys it names (maps merge key by key, lists are replaced whole), and
// `set_at` remembers where each key was written last, so errors found after merging still name
// the file, line and column (or the --set) that gave the bad value.
#include "core/config.h"

#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "core/config_schema.h"
#include "core/error.h"
#include "core/yaml_util.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;
using detail::config_fields;
using detail::Field;
using detail::find_field;
using detail::Where;

const char kValPrefix[] = "data.val.";

// "; did you mean ...?" for an unknown `name` under `parent`: a close sibling, else the same
// name in another section (`train.lr` -> `optim.lr`), else the list of valid names.
std::string key_hint(const std::string& parent, const std::string& name) {
  const std::vector<std::string> names = detail::child_names(parent);
  if (names.empty()) return "";
  if (detail::nearest(name, names).empty()) {
    for (const auto& f : config_fields()) {
      const size_t dot = f.key.rfind('.');
      if (dot != std::string::npos && f.key.compare(dot + 1, std::string::npos, name) == 0) {
        return fmt::format("; did you mean '{}'?", f.key);
      }
    }
  }
  return detail::unknown_key_hint(parent, name, names);
}

// Keys that brrr renamed: their old spelling is an error naming the new one (a silently
// ignored or re-meant key is worse than a failed start).
struct Renamed {
  const char* old_key;
  const char* new_key;
  const char* why;
};
const Renamed kRenamed[] = {
    {"train.eval_steps", "train.eval_batches",
     "it is the number of batches per evaluation; Hugging Face's eval_steps (steps between "
     "evaluations) is train.eval_every"},
};

std::string renamed_message(const std::string& key) {
  for (const auto& r : kRenamed) {
    if (key == r.old_key) {
      return fmt::format("was renamed {} ({})", r.new_key, r.why);
    }
  }
  return "";
}

bool is_key(const std::string& path) {
  return find_field(config_fields(), path) != nullptr || detail::is_section(path);
}

// One load: the config being built plus where each key was last set.
struct Loader {
  ExperimentConfig config;
  std::map<std::string, Where> set_at;
  // The base chain being loaded: canonical paths (for cycle detection) and names as shown.
  std::vector<std::string> chain_paths;
  std::vector<std::string> chain_names;

  void apply(const std::string& path, const YAML::Node& node, const Where& where);
  void apply_document(const YAML::Node& root, const std::string& name, const fs::path& dir);
  void apply_override(const std::string& assignment);
  void resolve();
};

// Writes `node` at `path` (a field, a section or "" = the whole document).
void Loader::apply(const std::string& path, const YAML::Node& node, const Where& where) {
  if (const Field* f = find_field(config_fields(), path)) {
    detail::decode_value(*f, f->in(config), node, path, where);
    set_at[path] = where;
    return;
  }
  if (node.IsNull()) return;  // "val:" with nothing under it sets nothing
  if (!node.IsMap()) {
    throw ConfigError(where.message(path, fmt::format("expected a section of keys ({}), got {}",
                                                      fmt::join(detail::child_names(path), ", "),
                                                      detail::describe_node(node))));
  }
  std::set<std::string> seen;
  for (const auto& item : node) {
    const Where key_at = where.at(item.first.Mark());
    const std::string name = item.first.IsScalar() ? item.first.Scalar() : "";
    const std::string child = path.empty() ? name : path + "." + name;
    if (path.empty() && name == "base") continue;  // followed by apply_document
    if (name.empty()) {
      throw ConfigError(
          key_at.message(path.empty() ? "(top level)" : path, "keys must be plain names"));
    }
    if (!seen.insert(name).second) throw ConfigError(key_at.message(child, "duplicate key"));
    if (const std::string renamed = renamed_message(child); !renamed.empty()) {
      throw ConfigError(key_at.message(child, renamed));
    }
    if (!is_key(child)) throw ConfigError(key_at.unknown_key(child, key_hint(path, name)));
    apply(child, item.second, item.second.IsNull() ? key_at : where.at(item.second.Mark()));
  }
}

// Applies one file's document: first its `base:` chain, then its own keys over it.
void Loader::apply_document(const YAML::Node& root, const std::string& name, const fs::path& dir) {
  const Where top = Where::in_file(name, root.Mark());
  if (root.IsNull()) return;  // an empty file
  if (!root.IsMap()) {
    throw ConfigError(
        fmt::format("{}: expected a mapping of sections (run, model, data, ...), got {}",
                    top.position(), detail::describe_node(root)));
  }
  for (const auto& item : root) {
    if (!item.first.IsScalar() || item.first.Scalar() != "base") continue;
    const Where at = item.second.IsNull() ? top.at(item.first.Mark()) : top.at(item.second.Mark());
    if (!item.second.IsScalar()) {
      throw ConfigError(at.message(
          "base", fmt::format("expected a file name, got {}", detail::describe_node(item.second))));
    }
    fs::path file = item.second.Scalar();
    if (file.is_relative()) file = dir / file;  // relative to the including file
    const std::string shown = file.lexically_normal().string();
    std::error_code ec;
    std::string canonical = fs::weakly_canonical(file, ec).string();
    if (ec) canonical = shown;
    if (std::find(chain_paths.begin(), chain_paths.end(), canonical) != chain_paths.end()) {
      throw ConfigError(fmt::format("base cycle at {}: {} -> {}", at.position(),
                                    fmt::join(chain_names, " -> "), shown));
    }
    const std::string text =
        detail::read_text_file(shown, fmt::format("base config (base: at {})", at.position()));
    chain_paths.push_back(canonical);
    chain_names.push_back(shown);
    apply_document(detail::parse_yaml(text, shown), shown, file.parent_path());
    chain_paths.pop_back();
    chain_names.pop_back();
  }
  apply("", root, top);
}

void Loader::apply_override(const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(
        fmt::format("--set {}: expected key=value, e.g. --set train.max_steps=100", assignment));
  }
  const std::string key = assignment.substr(0, eq);
  const Where where = Where::in_override(assignment);
  if (const std::string renamed = renamed_message(key); !renamed.empty()) {
    throw ConfigError(where.message(key, renamed));
  }
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("--set {}: the value is not valid YAML: {}", assignment, e.msg));
  }
  // Report the first unknown segment: "trian.max_steps" -> unknown key 'trian'.
  for (size_t end = 0; end != std::string::npos;) {
    end = key.find('.', end + 1);
    const std::string prefix = key.substr(0, end);
    const Field* f = find_field(config_fields(), prefix);
    if (f != nullptr && f->kind == detail::Kind::kOptions && end != std::string::npos) {
      // model.options.depth=4: one entry of a free-form map.
      YAML::Node entry(YAML::NodeType::Map);
      entry[key.substr(end + 1)] = value;
      apply(prefix, entry, where);
      return;
    }
    if (!is_key(prefix)) {
      const size_t dot = prefix.rfind('.');
      const std::string parent = dot == std::string::npos ? "" : prefix.substr(0, dot);
      const std::string name = dot == std::string::npos ? prefix : prefix.substr(dot + 1);
      throw ConfigError(where.unknown_key(prefix, key_hint(parent, name)));
    }
  }
  apply(key, value, where);
}

// Dependent defaults, resolved once here so that components never re-derive them.
void Loader::resolve() {
  // A file that counts in epochs leaves max_steps at its default: the run is then sized by
  // epochs alone. Setting both is the error validate() reports.
  if (config.train.max_epochs > 0 && set_at.count("train.max_steps") == 0) {
    config.train.max_steps = 0;
  }
  if (config.data.block_size == 0) config.data.block_size = config.model.block_size;
  for (const auto& f : config_fields()) {
    if (!f.rules.inherits || set_at.count(f.key) > 0) continue;
    const Field* from = find_field(config_fields(), "data." + f.key.substr(sizeof(kValPrefix) - 1));
    detail::copy_value(f, f.in(config), from->in(config));
  }
  if (config.data.val.block_size == 0) config.data.val.block_size = config.model.block_size;
  if (set_at.count("data.val.windows") == 0) config.data.val.windows = "sequential";
}

// --- Validation -------------------------------------------------------------------------------

// Rules that span fields or list lengths. `set_at` (may be null) locates values for messages;
// `origin` names the loaded file for "required" messages ("" for a config built in code).
class Validator {
 public:
  Validator(const ExperimentConfig& c, const std::map<std::string, Where>* set_at,
            std::string origin)
      : c_(c), set_at_(set_at), origin_(std::move(origin)) {}

  void run() const;

 private:
  // Where `key` (or, for "a.list[2].x", its list "a.list") was set; else `fallback`'s place.
  Where where(const std::string& key, const std::string& fallback = "") const {
    if (set_at_ == nullptr) return Where();
    auto it = set_at_->find(key.substr(0, key.find('[')));
    if (it == set_at_->end() && !fallback.empty()) it = set_at_->find(fallback);
    return it == set_at_->end() ? Where() : it->second;
  }
  // `key` is reported; `related` is the other key of the rule, whose place is shown when the
  // value of `key` itself is a default.
  void require(bool ok, const std::string& key, const std::string& what,
               const std::string& related = "") const {
    if (!ok) throw ConfigError(where(key, related).message(key, what));
  }
  void check_required(const Field& f) const;
  void check_transforms(const std::string& key, const std::vector<TransformOptions>& list) const;
  void check_normalisation(const std::string& prefix, const DatasetOptions& d) const;

  const ExperimentConfig& c_;
  const std::map<std::string, Where>* set_at_;
  std::string origin_;
};

void Validator::check_required(const Field& f) const {
  if (!f.rules.required || !static_cast<const std::string*>(f.in(c_))->empty()) return;
  if (set_at_ != nullptr && set_at_->count(f.key) > 0) {
    throw ConfigError(where(f.key).message(f.key, "must not be empty"));
  }
  throw ConfigError(
      origin_.empty()
          ? fmt::format("{} is required", f.key)
          : fmt::format("{} is required but {} (with its bases) does not set it", f.key, origin_));
}

void Validator::check_transforms(const std::string& key,
                                 const std::vector<TransformOptions>& list) const {
  for (size_t i = 0; i < list.size(); ++i) {
    const TransformOptions& t = list[i];
    const std::string item = fmt::format("{}[{}]", key, i);
    require(!t.name.empty(), item + ".name", "is required (e.g. {name: horizontal_flip})");
    if (t.name != "horizontal_flip") {
      require(t.size.size() == 1 || t.size.size() == 2, item + ".size",
              fmt::format("{} needs 1 or 2 positive values ([side] or [height, width]), got {}",
                          t.name, t.size.size()));
    }
    if (t.name == "random_resized_crop") {
      for (const auto& [name, range] :
           {std::pair{"scale", &t.scale}, std::pair{"ratio", &t.ratio}}) {
        require(range->size() == 2 && (*range)[0] <= (*range)[1], item + "." + name,
                fmt::format("must be two values [min, max] with min <= max, got [{}]",
                            fmt::join(*range, ", ")));
      }
    }
  }
}

void Validator::check_normalisation(const std::string& prefix, const DatasetOptions& d) const {
  require(d.mean.size() == d.std.size(), prefix + ".std",
          fmt::format("must have as many values as {}.mean ({}), got {}", prefix, d.mean.size(),
                      d.std.size()),
          prefix + ".mean");
}

void Validator::run() const {
  for (const auto& f : config_fields()) {
    check_required(f);
    detail::check_value(f, f.in(c_), f.key, where(f.key));
  }
  check_transforms("data.transforms", c_.data.transforms);
  check_transforms("data.val.transforms", c_.data.val.transforms);
  check_normalisation("data", c_.data);
  check_normalisation("data.val", c_.data.val);

  const std::string& name = c_.run.name;
  require(name.find('/') == std::string::npos && name != "." && name != ".." &&
              name.find('\0') == std::string::npos,
          "run.name",
          fmt::format("must be a single folder name (no '/', not '.' or '..'), got '{}'", name));
  require(c_.model.name != "convnet" || !c_.model.channels.empty(), "model.channels",
          "convnet needs at least one block width, got []");

  require(c_.model.n_embd % c_.model.n_head == 0, "model.n_embd",
          fmt::format("must be a multiple of model.n_head ({}), got {}", c_.model.n_head,
                      c_.model.n_embd),
          "model.n_head");
  require(c_.model.head_chunk_rows == 0 || c_.model.fused != "false", "model.head_chunk_rows",
          "chunks the fused head + loss: needs model.fused auto or true, got false", "model.fused");
  require(c_.optim.betas.size() == 2, "optim.betas",
          fmt::format("expected two values [beta1, beta2], got {}", c_.optim.betas.size()));
  require(!c_.optim.nesterov || c_.optim.momentum > 0, "optim.nesterov", "needs optim.momentum > 0",
          "optim.momentum");
  const TrainOptions& t = c_.train;
  require((t.max_steps > 0) != (t.max_epochs > 0), "train.max_steps",
          fmt::format("set exactly one of train.max_steps and train.max_epochs (the other 0), got "
                      "max_steps {} and max_epochs {}",
                      t.max_steps, t.max_epochs),
          "train.max_epochs");
  // With max_epochs the step count is known once the data is: the schedule checks it then.
  require(c_.schedule.name == "constant" || t.max_steps == 0 ||
              c_.schedule.warmup_steps < c_.train.max_steps,
          "schedule.warmup_steps",
          fmt::format("must be < train.max_steps ({}) for a decaying schedule, got {}",
                      c_.train.max_steps, c_.schedule.warmup_steps),
          "train.max_steps");
  require(!t.profile.memory || t.profile.steps > 0, "train.profile.memory",
          "traces the allocations of the profiled steps: needs train.profile.steps > 0",
          "train.profile.steps");
  require(t.profile.steps == 0 || t.max_steps == 0 || t.profile.start_step < t.max_steps,
          "train.profile.start_step",
          fmt::format("must be < train.max_steps ({}) for a trace to be recorded, got {}",
                      t.max_steps, t.profile.start_step),
          "train.max_steps");
  const bool has_val = !c_.data.val.dataset.empty();
  require(has_val || c_.train.early_stopping.patience == 0, "train.early_stopping.patience",
          "needs evaluation data (data.val.dataset)");
  require(has_val || c_.schedule.name != "plateau", "schedule.name",
          "plateau needs evaluation data (data.val.dataset)");
}

ExperimentConfig parse_text(const std::string& text, const std::string& name,
                            const std::vector<std::string>& overrides, const fs::path& base_dir,
                            const std::string& canonical_path) {
  Loader loader;
  if (!canonical_path.empty()) {
    loader.chain_paths.push_back(canonical_path);
    loader.chain_names.push_back(name);
  }
  loader.apply_document(detail::parse_yaml(text, name), name, base_dir);
  for (const auto& assignment : overrides) loader.apply_override(assignment);
  loader.resolve();
  Validator(loader.config, &loader.set_at, name).run();
  for (const auto& [key, where] : loader.set_at) {
    loader.config.origins[key] =
        where.assignment.empty() ? where.position() : "--set " + where.assignment;
  }
  return loader.config;
}

std::string indent(size_t depth) {
  return std::string(2 * depth, ' ');
}

}  // namespace

ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = detail::read_text_file(path, "config file");
  std::error_code ec;
  std::string canonical = fs::weakly_canonical(path, ec).string();
  if (ec) canonical = path;
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  ExperimentConfig config = parse_text(text, path, overrides, dir, canonical);
  config.source_path = path;
  return config;
}

ExperimentConfig parse_config(const std::string& yaml_text, const std::string& name,
                              const std::vector<std::string>& overrides,
                              const std::string& base_dir) {
  return parse_text(yaml_text, name, overrides, base_dir, "");
}

void apply_override(ExperimentConfig& config, const std::string& assignment) {
  Loader loader;
  loader.config = config;
  loader.apply_override(assignment);  // type and per-key rules are checked as it is written
  config = std::move(loader.config);
}

std::string config_message(const ExperimentConfig& config, const std::string& key,
                           const std::string& what) {
  auto it = config.origins.find(key);
  if (it == config.origins.end())
    it = config.origins.find(key.substr(0, key.find('[')));  // its list
  if (it == config.origins.end() || it->second.empty()) {
    if (config.source_path.empty()) return fmt::format("{}: {}", key, what);
    return fmt::format("{}: {} (the default; set it in {})", key, what, config.source_path);
  }
  if (it->second.rfind("--set ", 0) == 0) return fmt::format("{}: {}: {}", it->second, key, what);
  return fmt::format("{} at {}: {}", key, it->second, what);
}

void validate(const ExperimentConfig& config) {
  Validator(config, nullptr, "").run();
}

std::string to_yaml(const ExperimentConfig& config) {
  std::string out;
  std::vector<std::string> open;  // the sections of the previous key, outermost first
  for (const auto& f : config_fields()) {
    std::vector<std::string> parts;
    for (size_t start = 0, dot = 0; dot != std::string::npos; start = dot + 1) {
      dot = f.key.find('.', start);
      parts.push_back(f.key.substr(start, dot - start));
    }
    const std::string leaf = parts.back();
    parts.pop_back();
    size_t common = 0;
    while (common < open.size() && common < parts.size() && open[common] == parts[common]) ++common;
    open.resize(common);
    for (size_t depth = common; depth < parts.size(); ++depth) {
      out += fmt::format("{}{}:\n", indent(depth), parts[depth]);
      open.push_back(parts[depth]);
    }
    const std::string value = detail::format_value(f, f.in(config), indent(parts.size() + 1));
    out +=
        fmt::format("{}{}:{}{}\n", indent(parts.size()), leaf, value[0] == '\n' ? "" : " ", value);
  }
  return out;
}

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for (const auto& f : config_fields()) {
    keys.push_back(f.key);
    if (f.kind != detail::Kind::kTransforms) continue;
    for (const auto& tf : detail::transform_fields()) keys.push_back(f.key + "[]." + tf.key);
  }
  return keys;
}

std::string config_reference() {
  const ExperimentConfig defaults;
  std::string out;
  for (const auto& f : config_fields()) {
    const std::string shown = f.rules.inherits ? "data." + f.key.substr(sizeof(kValPrefix) - 1)
                                               : detail::format_value(f, f.in(defaults), "");
    out += fmt::format("{:<34} {:<11} {:<12} {}\n", f.key, detail::kind_name(f.kind), shown, f.doc);
    if (f.kind != detail::Kind::kTransforms) continue;
    for (const auto& tf : detail::transform_fields()) {
      out += fmt::format("{:<34} {:<11} {:<12} {}\n", f.key + "[]." + tf.key,
                         detail::kind_name(tf.kind),
                         detail::format_value(tf, tf.in(TransformOptions()), ""), tf.doc);
    }
  }
  return out;
}

bool operator==(const ExperimentConfig& a, const ExperimentConfig& b) {
  const auto& fields = config_fields();
  return std::all_of(fields.begin(), fields.end(),
                     [&](const Field& f) { return detail::values_equal(f, f.in(a), f.in(b)); });
}
bool operator!=(const ExperimentConfig& a, const ExperimentConfig& b) {
  return !(a == b);
}

bool operator==(const TransformOptions& a, const TransformOptions& b) {
  const auto& fields = detail::transform_fields();
  return std::all_of(fields.begin(), fields.end(),
                     [&](const Field& f) { return detail::values_equal(f, f.in(a), f.in(b)); });
}
bool operator!=(const TransformOptions& a, const TransformOptions& b) {
  return !(a == b);
}

}  // namespace brrr
