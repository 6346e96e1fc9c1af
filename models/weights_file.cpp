#include "models/weights_file.h"

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include "core/checkpoint_io.h"
#include "core/error.h"
#include "core/json_lines.h"
#include "models/state_dict.h"

namespace brrr {
namespace {

struct DtypeName {
  const char* name;
  at::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
    {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
    {"U8", at::kByte},    {"BOOL", at::kBool},
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot open weights file '{}'", path));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint64_t little_endian_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

bool looks_like_safetensors(const std::string& bytes) {
  if (bytes.size() < 10) return false;
  const uint64_t n = little_endian_u64(bytes.data());
  return n > 1 && n <= bytes.size() - 8 && bytes[8] == '{';
}

const char* dtype_name(at::ScalarType type, const std::string& key) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  throw Error(fmt::format("safetensors: tensor '{}' has dtype {}, which the format cannot hold",
                          key, c10::toString(type)));
}

}  // namespace

TensorMap read_safetensors(const std::string& path) {
  const std::string bytes = read_all(path);
  if (!looks_like_safetensors(bytes)) {
    throw Error(
        fmt::format("'{}' is not a safetensors file (no 8-byte header length and JSON "
                    "header at its start)",
                    path));
  }
  const uint64_t header_size = little_endian_u64(bytes.data());
  const std::string header = bytes.substr(8, header_size);
  const uint64_t data_begin = 8 + header_size;
  const uint64_t data_size = bytes.size() - data_begin;
  const JsonRecord record = parse_json_record(header, path + " (safetensors header)");
  TensorMap out;
  for (const auto& [key, value] : record.strings) {
    const std::string suffix = "/dtype";
    if (key.size() <= suffix.size() ||
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string name = key.substr(0, key.size() - suffix.size());
    if (name.rfind("__metadata__", 0) == 0) continue;
    at::ScalarType type = at::kFloat;
    bool known = false;
    for (const auto& d : kDtypes) {
      if (value == d.name) type = d.type, known = true;
    }
    if (!known)
      throw Error(fmt::format("'{}': tensor '{}' has unknown dtype '{}'", path, name, value));
    std::vector<int64_t> shape;
    for (int i = 0;; ++i) {
      auto it = record.numbers.find(fmt::format("{}/shape/{}", name, i));
      if (it == record.numbers.end()) break;
      shape.push_back(static_cast<int64_t>(it->second));
    }
    const auto b = record.numbers.find(name + "/data_offsets/0");
    const auto e = record.numbers.find(name + "/data_offsets/1");
    if (b == record.numbers.end() || e == record.numbers.end()) {
      throw Error(fmt::format("'{}': tensor '{}' has no data_offsets", path, name));
    }
    const auto begin = static_cast<uint64_t>(b->second), end = static_cast<uint64_t>(e->second);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const uint64_t expected = static_cast<uint64_t>(numel) * c10::elementSize(type);
    if (begin > end || end > data_size || end - begin != expected) {
      throw Error(fmt::format(
          "'{}': tensor '{}' ({} {}) has data_offsets [{}, {}) but needs {} bytes within the {} "
          "data bytes",
          path, name, value, fmt::join(shape, "x"), begin, end, expected, data_size));
    }
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(type));
    if (expected > 0) std::memcpy(t.data_ptr(), bytes.data() + data_begin + begin, expected);
    out.emplace(name, std::move(t));
  }
  return out;
}

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> data;
  JsonObject header;
  if (!metadata.empty()) {
    JsonObject meta;
    for (const auto& [k, v] : metadata) meta.set(k, v);
    header.set("__metadata__", meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    std::vector<JsonValue> shape;
    for (int64_t d : t.sizes()) shape.emplace_back(d);
    JsonObject entry;
    entry.set("dtype", dtype_name(t.scalar_type(), name));
    entry.set("shape", JsonValue(shape));
    entry.set("data_offsets",
              JsonValue(std::vector<JsonValue>{JsonValue(offset), JsonValue(offset + bytes)}));
    header.set(name, entry);
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  write_file_atomic(path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    char length[8];
    uint64_t n = text.size();
    for (char& c : length) c = static_cast<char>(n & 0xff), n >>= 8;
    out.write(length, 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const at::Tensor& t : data) {
      out.write(static_cast<const char*>(t.data_ptr()),
                static_cast<std::streamsize>(t.numel() * t.element_size()));
    }
    out.flush();
    if (!out) throw Error(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
  });
}

TensorMap read_weights_file(const std::string& path) {
  // The format from the first bytes only; the reader of that format reads the file.
  std::string head(9, '\0');
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(fmt::format("cannot open weights file '{}'", path));
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
  }
  const bool safetensors_head =
      head.size() == 9 && little_endian_u64(head.data()) > 1 && head[8] == '{';
  if (safetensors_head) return read_safetensors(path);
  if (head.compare(0, 4, "PK\x03\x04") != 0) {
    throw Error(
        fmt::format("'{}' is neither a safetensors file nor a PyTorch zip archive "
                    "(torch.save or a brrr checkpoint)",
                    path));
  }
  // A brrr checkpoint is a TorchScript archive whose "model" entry holds the weights; a
  // torch.save() file is a pickled object (a state_dict).
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    c10::IValue model;
    if (archive.try_read("model", model) && model.isGenericDict()) {
      TensorMap out;
      for (const auto& entry : model.toGenericDict()) {
        out.emplace(entry.key().toStringRef(), entry.value().toTensor());
      }
      return out;
    }
  } catch (const c10::Error&) {
    // not a TorchScript archive: a torch.save() file
  }
  return load_tensor_dict(path);
}

bool is_hf_gpt2(const TensorMap& weights) {
  for (const char* key : {"h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.weight"}) {
    auto it = weights.find(key);
    if (it != weights.end() && it->second.dim() == 2) {
      return it->second.size(1) == 3 * it->second.size(0);  // Conv1D: (in, out) = (C, 3C)
    }
  }
  return false;
}

namespace {

// GPT-2's Conv1D layers: a (in, out) weight where brrr's Linear has (out, in).
const std::set<std::string> kConv1D = {"attn.c_attn.weight", "attn.c_proj.weight",
                                       "mlp.c_fc.weight", "mlp.c_proj.weight"};

bool ends_with(const std::string& name, const std::string& tail) {
  return name.size() >= tail.size() &&
         name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_conv1d(const std::string& name) {
  for (const auto& conv : kConv1D) {
    if (ends_with(name, conv)) return true;
  }
  return false;
}

}  // namespace

TensorMap to_hf_gpt2(const TensorMap& weights, int64_t vocab_size) {
  const auto wte = weights.find("transformer.wte.weight");
  const auto qkv = weights.find("transformer.h.0.attn.c_attn.weight");
  if (wte == weights.end() || qkv == weights.end() || qkv->second.dim() != 2 ||
      qkv->second.size(0) != 3 * qkv->second.size(1)) {
    throw Error(
        "not the weights of a brrr gpt model (no transformer.wte.weight, or no "
        "transformer.h.0.attn.c_attn.weight of shape (3C, C))");
  }
  TensorMap out;
  for (const auto& [name, tensor] : weights) {
    at::Tensor t = tensor;
    if (is_conv1d(name)) t = t.t().contiguous();
    if (name == "transformer.wte.weight" || name == "lm_head.weight") {
      if (t.size(0) < vocab_size) {
        throw Error(fmt::format("{} has {} rows, fewer than the vocabulary size {} asked for", name,
                                t.size(0), vocab_size));
      }
      t = t.slice(0, 0, vocab_size).clone();  // its own storage: safetensors shares none
    }
    out[name] = t;
  }
  if (out.count("lm_head.weight") == 0)
    out["lm_head.weight"] = out["transformer.wte.weight"].clone();
  return out;
}

TensorMap from_hf_gpt2(const TensorMap& weights, int64_t vocab_size) {
  TensorMap out;
  for (const auto& [key, tensor] : weights) {
    std::string name = key;
    if (name.rfind("transformer.", 0) != 0 && name.rfind("lm_head.", 0) != 0) {
      name = "transformer." + name;
    }
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) continue;  // masks
    at::Tensor t = tensor;
    if (is_conv1d(name)) t = t.t().contiguous();
    if (name == "transformer.wte.weight" || name == "lm_head.weight") {
      if (t.size(0) > vocab_size) {
        throw Error(fmt::format("{} has {} rows, more than model.vocab_size {}", name, t.size(0),
                                vocab_size));
      }
      if (t.size(0) < vocab_size) {
        t = at::cat({t, at::zeros({vocab_size - t.size(0), t.size(1)}, t.options())});
      }
    }
    out[name] = t;
  }
  if (out.count("lm_head.weight") == 0 && out.count("transformer.wte.weight") > 0) {
    out["lm_head.weight"] = out["transformer.wte.weight"];
  }
  return out;
}

}  // namespace brrr
