#include "models/state_dict.h"

#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/serialize.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string_view>

#include "core/error.h"

namespace brrr {
namespace {

std::string shape_str(const at::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes(), ", "));
}

std::map<std::string, at::Tensor> to_tensor_map(const c10::Dict<c10::IValue, c10::IValue>& dict,
                                                const std::string& what) {
  std::map<std::string, at::Tensor> out;
  for (const auto& entry : dict) {
    if (!entry.key().isString()) {
      throw Error(fmt::format("{}: a key is a {}, expected a string", what, entry.key().tagKind()));
    }
    const std::string key = entry.key().toStringRef();
    if (!entry.value().isTensor()) {
      throw Error(fmt::format("{}: value of key '{}' is a {}, expected a tensor", what, key,
                              entry.value().tagKind()));
    }
    out.emplace(key, entry.value().toTensor());
  }
  return out;
}

}  // namespace

std::map<std::string, at::Tensor> named_state(const torch::nn::Module& module) {
  std::map<std::string, at::Tensor> state;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) state.emplace(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) state.emplace(b.key(), b.value());
  return state;
}

LoadReport load_state_dict(torch::nn::Module& module,
                           const std::map<std::string, at::Tensor>& state, bool strict) {
  const auto own = named_state(module);
  std::vector<std::string> missing;
  std::vector<std::string> unexpected;
  // A missing name is fine when its tensor is also reachable under a name that is present.
  std::map<const c10::TensorImpl*, bool> impl_provided;
  for (const auto& [name, tensor] : own) {
    impl_provided[tensor.unsafeGetTensorImpl()] |= state.count(name) > 0;
  }
  for (const auto& [name, tensor] : own) {
    if (state.count(name) == 0 && !impl_provided[tensor.unsafeGetTensorImpl()]) {
      missing.push_back(name);
    }
  }
  for (const auto& entry : state) {
    if (own.count(entry.first) == 0) unexpected.push_back(entry.first);
  }
  if (strict && (!missing.empty() || !unexpected.empty())) {
    throw Error(fmt::format(
        "load_state_dict into {}: {} missing key(s) [{}], {} unexpected key(s) [{}]", module.name(),
        missing.size(), fmt::join(missing, ", "), unexpected.size(), fmt::join(unexpected, ", ")));
  }
  for (const auto& [name, src] : state) {
    if (own.count(name) == 0) continue;  // unexpected (non-strict)
    const at::Tensor& dst = own.at(name);
    if (!src.defined() || src.sizes() != dst.sizes()) {
      throw Error(fmt::format(
          "load_state_dict into {}: key '{}' has shape {} in the source but {} "
          "in the model",
          module.name(), name, src.defined() ? shape_str(src) : "undefined", shape_str(dst)));
    }
  }
  at::NoGradGuard no_grad;
  for (const auto& [name, src] : state) {
    if (own.count(name) > 0) own.at(name).copy_(src);
  }
  return LoadReport{missing, unexpected};
}

void load_state_dict(torch::nn::Module& module, const c10::Dict<c10::IValue, c10::IValue>& state) {
  (void)load_state_dict(module, to_tensor_map(state, "load_state_dict into " + module.name()));
}

namespace {

// The key under which the rewritten pickle below keeps the OrderedDict class in memo 0.
constexpr std::string_view kMemoKey = "__brrr_ordered_dict_class__";

// `torch.save(model.state_dict())` pickles an OrderedDict: GLOBAL collections.OrderedDict,
// BINPUT 0, EMPTY_TUPLE, REDUCE, its items (SETITEMS), then its `_metadata` attribute as a final
// BUILD. libtorch's unpickler turns every OrderedDict into None on purpose (it expects them only
// as a tensor's unused backward hooks, which are `BINGET 0, EMPTY_TUPLE, REDUCE` later in the
// same pickle), so such a file fails with "Expected GenericDict but got None". It has no POP to
// drop a value either. So the archive is rewritten with a data.pkl that builds a plain dict whose
// extra key kMemoKey holds the class (memo 0 stays the class for the hooks), without the final
// attribute state; the key is removed after loading. Returns false (bytes untouched) for any
// other pickle.
bool make_ordered_dict_plain(std::vector<char>& bytes) {
  caffe2::serialize::PyTorchStreamReader reader(
      std::make_shared<caffe2::serialize::MemoryReadAdapter>(bytes.data(), bytes.size()));
  if (!reader.hasRecord("data.pkl")) return false;
  const auto [data, size] = reader.getRecord("data.pkl");
  const std::string_view pickle(static_cast<const char*>(data.get()), size);
  static constexpr char kHeadBytes[] =
      "\x80\x02"
      "ccollections\nOrderedDict\nq\x00)R";
  static constexpr std::string_view kHead(kHeadBytes, sizeof(kHeadBytes) - 1);  // holds a NUL
  if (pickle.substr(0, kHead.size()) != kHead) return false;
  // The attribute state: EMPTY_DICT, BINPUT n (or LONG_BINPUT), BINUNICODE "_metadata", ... BUILD.
  static constexpr char kMetaBytes[] = "X\x09\x00\x00\x00_metadata";
  const size_t meta = pickle.rfind(std::string_view(kMetaBytes, sizeof(kMetaBytes) - 1));
  size_t items_end = pickle.size() - 1;  // STOP
  if (meta != std::string_view::npos && pickle.substr(pickle.size() - 2) == "b.") {
    if (meta >= 3 && pickle[meta - 2] == 'q' && pickle[meta - 3] == '}') {
      items_end = meta - 3;
    } else if (meta >= 6 && pickle[meta - 5] == 'r' && pickle[meta - 6] == '}') {
      items_end = meta - 6;
    } else {
      return false;
    }
  }
  std::string rewritten = "\x80\x02}";
  const uint32_t key_size = kMemoKey.size();
  rewritten += 'X';
  rewritten.append(reinterpret_cast<const char*>(&key_size), 4);  // little-endian length
  rewritten += kMemoKey;
  rewritten += kHead.substr(2, kHead.size() - 4);  // GLOBAL collections.OrderedDict, BINPUT 0
  rewritten += 's';                                // SETITEM: the class under kMemoKey
  rewritten += pickle.substr(kHead.size(), items_end - kHead.size());
  rewritten += '.';

  std::vector<char> out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
    out.insert(out.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
    return n;
  });
  for (const std::string& name : reader.getAllRecords()) {
    if (name == "data.pkl") {
      writer.writeRecord(name, rewritten.data(), rewritten.size());
    } else {
      const auto [record, record_size] = reader.getRecord(name);
      writer.writeRecord(name, record.get(), record_size);
    }
  }
  writer.writeEndOfFile();
  bytes = std::move(out);
  return true;
}

}  // namespace

std::map<std::string, at::Tensor> load_tensor_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot open tensor file '{}'", path));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  bool ordered = false;
  try {
    ordered = make_ordered_dict_plain(bytes);
    value = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    throw Error(fmt::format("cannot read tensor file '{}' (expected Python torch.save output): {}",
                            path, e.what_without_backtrace()));
  }
  if (!value.isGenericDict()) {
    throw Error(fmt::format("tensor file '{}' holds a {}, expected a dict of tensors", path,
                            value.tagKind()));
  }
  c10::Dict<c10::IValue, c10::IValue> dict = value.toGenericDict();
  if (ordered) (void)dict.erase(std::string(kMemoKey));
  return to_tensor_map(dict, "tensor file '" + path + "'");
}

}  // namespace brrr
