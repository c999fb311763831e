// hpctrain export: a trained model out of hpctrain.
//
//   hpctrain export --checkpoint runs/a/ckpt-625.h5 --format torch -o DIR
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
// One process, no MPI. DIR is created if missing (its parent must exist);
// each file is written to a temporary name and renamed, so a file in DIR is
// complete or absent. Bad input (a damaged checkpoint, an unknown format,
// --out missing) is one line, exit 2.
#pragma once

#include <string>

#include "config/config.h"
#include "nn/model.h"

namespace hpc::ckpt {
struct Checkpoint;
}

namespace hpc::train {

int export_command(const Config& cfg);

// src/train/model.py as it is in the source, SPEC and INPUT_SHAPE None (model_py.cpp).
const char* torch_model_py();

// --format onnx (export_onnx.cpp): the serialised ONNX model of `c`; UserError
// naming a layer the export cannot express, or when built without libonnx-dev.
bool onnx_available();
std::string onnx_bytes(const ckpt::Checkpoint& c, const nn::Model& model, const std::string& what);

}  // namespace hpc::train
