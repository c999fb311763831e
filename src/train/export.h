// hpctrain export: a trained model out of hpctrain.
//
//   hpctrain export --checkpoint runs/a/ckpt-625.h5 --format torch|hf|onnx -o DIR [--dtype
//   auto|fp32|bf16|fp16] hpctrain export --model.init HF_DIR --format hf -o DIR [--max-shard-mb 5000]
//
// The model comes from a checkpoint or weights one has (train/model_source.h);
// the weights are written in the dtype it was trained in (a checkpoint's
// train.precision) or stored in (--model.init's files), unless --dtype says
// otherwise; 16-bit values are rounded to nearest even.
//
// torch: DIR/model.safetensors (the safetensors format: an 8-byte
// little-endian header length, a JSON header of name → dtype, shape and byte
// range, then the raw little-endian tensors) holding every parameter and
// buffer under hpctrain's own names ("3.conv.weight", "1.bn.running_mean"),
// plus DIR/model.py, whose build_model() returns plain PyTorch modules for
// the checkpoint's spec with exactly those state_dict names, so
// load_state_dict takes the file as it is (model.py also carries a reader of
// the format, for machines without the safetensors package). Every layer
// hpctrain has is expressible; the tied lm_head is stored once, as the
// embedding's token matrix.
//
// hf: config.json (with the model's token ids and torch_dtype) and the
// weights under GPT2LMHeadModel's or LlamaForCausalLM's names, in shards with
// model.safetensors.index.json above --max-shard-mb (train/hf_layout.h,
// weight_files.h); the tokenizer file the weights came with is copied along.
// onnx: model.onnx (export_onnx.cpp).
//
// One process, no MPI. DIR is created if missing (its parent must exist);
// each file is written to a temporary name and renamed, so a file in DIR is
// complete or absent. Bad input (a damaged checkpoint, an unknown format,
// --out missing) is one line, exit 2.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "nn/model.h"

namespace hpc::train {

struct ModelSource;

int export_command(const Config& cfg);

// src/train/model.py as it is in the source, SPEC and INPUT_SHAPE None (model_py.cpp).
const char* torch_model_py();

// --format onnx (export_onnx.cpp): the serialised ONNX model of `src`; UserError
// naming a layer the export cannot express, or when built without libonnx-dev.
constexpr int ONNX_OPSET = 17;
bool onnx_available();
// metadata: key/value pairs for metadata_props (the input's normalisation).
std::string onnx_bytes(const ModelSource& src, const nn::Model& model, const std::string& what,
                       const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace hpc::train
