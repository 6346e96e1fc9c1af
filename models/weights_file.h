#pragma once
// Model weights in and out of brrr, in the formats of the field:
//   - safetensors (Hugging Face's format: an 8-byte header length, a JSON header of
//     {name: {dtype, shape, data_offsets}}, then the raw little-endian bytes),
//   - a PyTorch `torch.save(model.state_dict())` file (an OrderedDict of tensors),
//   - a brrr checkpoint (its "model" entry; the optimizer state is not read).
// and the mapping of a Hugging Face GPT-2 checkpoint (GPT2LMHeadModel) onto brrr's `gpt`.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

namespace brrr {

using TensorMap = std::map<std::string, at::Tensor>;

/// The tensors of a safetensors file, on the CPU. Throws Error naming the file on a malformed
/// header (bad length, not JSON, an unknown dtype, offsets outside the data or not matching the
/// shape).
TensorMap read_safetensors(const std::string& path);

/// Writes `tensors` (any device and dtype safetensors knows; made contiguous on the CPU) as a
/// safetensors file that `safetensors.torch.load_file` reads; `metadata` goes to __metadata__.
/// Written to a temporary file and renamed, so `path` is never partial.
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// The weights in `path`, whatever of the three formats above it is (told by its first bytes
/// and, for a zip archive, by its entries). Throws Error naming the file and what it found.
TensorMap read_weights_file(const std::string& path);

/// True when `weights` look like a Hugging Face GPT-2 checkpoint: Conv1D weights stored
/// (in, out), e.g. h.0.attn.c_attn.weight of shape (n_embd, 3 n_embd).
bool is_hf_gpt2(const TensorMap& weights);

/// A Hugging Face GPT-2 checkpoint renamed and reshaped for brrr's `gpt` model: the
/// "transformer." prefix added where it is missing, Conv1D weights transposed into Linear's
/// (out, in), the attention-mask buffers (attn.bias, attn.masked_bias) dropped, the token
/// embedding padded with zero rows from its vocabulary (50257) to `vocab_size`, and lm_head.weight
/// taken from the embedding when absent (GPT-2 ties them).
TensorMap from_hf_gpt2(const TensorMap& weights, int64_t vocab_size);

/// The inverse, for `trainer export --names hf-gpt2`: brrr `gpt` weights under the names and
/// layout of Hugging Face's GPT2LMHeadModel (Linear weights transposed back into Conv1D's
/// (in, out); the embedding and the head cut to `vocab_size` rows, GPT-2's 50257, dropping the
/// padding rows), so that `GPT2LMHeadModel(config).load_state_dict(load_file(f), strict=True)`
/// takes them. lm_head.weight is written too (a copy when tied). Throws Error when `weights` are
/// not a brrr gpt model's or have fewer than `vocab_size` rows.
TensorMap to_hf_gpt2(const TensorMap& weights, int64_t vocab_size);

}  // namespace brrr
