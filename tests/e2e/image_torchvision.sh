#!/usr/bin/env bash
# ctest-timeout: 400
# The image pipeline and the ResNet-50 preset against torchvision itself
# (Debian's python3-torchvision; SKIPPED without it):
#  1. random_resized_crop: 10,000 boxes of a 500x375 image from hpctrain's
#     draws and from torchvision's RandomResizedCrop.get_params have the same
#     distribution of area share, aspect ratio and position (two-sample
#     Kolmogorov–Smirnov at α = 0.001), inside the stated ranges;
#  2. the validation view of JPEGs (Resize(round(S/0.875)) + CenterCrop(S)) is
#     torchvision's on PIL within 1 grey level (a 4x larger image too: the
#     validation view is never DCT-scaled);
#  3. ResNet-50 at full width (torchvision's resnet50, 3 classes), trained one
#     step on a packed image folder: `export --format torch` gives
#     torchvision.safetensors, which torchvision.models.resnet50 loads with
#     load_state_dict (strict), and model.py's model.safetensors too; both
#     forward the validation views to `hpctrain predict`'s logits within 1e-4
#     relative; `export --format onnx` passes onnx.checker, and its graph,
#     evaluated operator by operator with torch.nn.functional, gives them too.
source "$(dirname "$0")/lib.bash"
"$PYTHON" -c "import torch, torchvision, PIL, h5py, numpy" 2>/dev/null ||
  skip "python3-torchvision (with torch, PIL, h5py, numpy) is not installed"
export HPC_TEST_TIMEOUT=300
mkdir -p "$TMP/dump"

# ---- 1 and 2: crop boxes and validation views ---------------------------------------------------
"$PYTHON" - "$TMP/dump" <<'EOF'
import sys
import numpy as np
from PIL import Image
d = sys.argv[1]
rng = np.random.RandomState(3)
lines = []
for i, (w, h, s) in enumerate([(40, 30, 32), (37, 50, 32), (64, 64, 56), (33, 33, 32), (200, 150, 32)]):
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([128 + 100 * np.sin(x / 4 + c) * np.cos(y / 5) for c in range(3)], -1) + rng.normal(0, 8, (h, w, 3))
    path = f"{d}/img{i}.jpg"
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(path, quality=92)
    lines.append(f"{s} {path}")
open(f"{d}/files.txt", "w").write("\n".join(lines) + "\n")
EOF
HPC_IMAGE_DUMP="$TMP/dump" "$BUILD/tests/test_image_augment" --gtest_filter='*DumpForTorchvision*' >"$TMP/dump.log" 2>&1 ||
  { cat "$TMP/dump.log"; fail "the dump"; }
"$PYTHON" - "$TMP/dump" <<'EOF' || fail "crop boxes or validation views differ from torchvision's"
import sys
import numpy as np, torch
from PIL import Image
from torchvision import transforms
d = sys.argv[1]
ours = np.loadtxt(f"{d}/boxes.txt")
torch.manual_seed(0)
img = Image.new("RGB", (500, 375))
ref = []
for _ in range(len(ours)):
    i, j, h, w = transforms.RandomResizedCrop.get_params(img, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
    ref.append((j, i, j + w, i + h))
ref = np.array(ref, dtype=np.float64)
def stats(b):
    w, h = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    return {"share": w * h / (500 * 375), "ratio": w / h, "x0": b[:, 0], "y0": b[:, 1]}
def ks(a, b):
    a, b = np.sort(a), np.sort(b)
    v = np.concatenate([a, b])
    return np.abs(np.searchsorted(a, v, "right") / len(a) - np.searchsorted(b, v, "right") / len(b)).max()
limit = 1.95 * np.sqrt(2 / len(ours))  # α = 0.001
so, sr = stats(ours), stats(ref)
for k in so:
    D = ks(so[k], sr[k])
    print(f"random_resized_crop {k}: KS {D:.4f} (limit {limit:.4f}); means {so[k].mean():.4f} vs torchvision {sr[k].mean():.4f}")
    assert D < limit, k
assert (ours[:, 0] >= 0).all() and (ours[:, 2] <= 500).all() and (ours[:, 3] <= 375).all()
for n, line in enumerate(open(f"{d}/files.txt")):
    s, path = line.split()
    s = int(s)
    want = np.asarray(transforms.Compose([transforms.Resize(round(s / 0.875)), transforms.CenterCrop(s)])(
        Image.open(path).convert("RGB"))).transpose(2, 0, 1).astype(int)
    got = np.fromfile(path + ".u8", np.uint8).reshape(3, s, s).astype(int)
    diff = np.abs(got - want)
    print(f"validation view {path.split('/')[-1]} ({s}): max difference {diff.max()}, mean {diff.mean():.3f}")
    assert diff.max() <= 1, (path, diff.max())
EOF
pass "random_resized_crop's distribution and the validation view match torchvision's"

# ---- 3. ResNet-50 at full width against torchvision ----------------------------------------------
"$PYTHON" "$ROOT/tests/e2e/make_image_folder.py" "$TMP/folder" --per-class 6 --size 64 64
"$BUILD/hpcdata" pack --from image-folder "$TMP/folder" --val-fraction 0.34 -o "$TMP/img.h5" >/dev/null 2>&1 || fail "pack"
run_mpi 1 "$BUILD/hpctrain" --data.path "$TMP/img.h5" --model.preset resnet50 --data.augment "random_resized_crop:64, flip" \
  --train.steps 1 --train.batch_size 4 --optim.name sgd --optim.lr 0.05 --optim.momentum 0 --data.workers 1 \
  --log.progress none --run.dir "$TMP/r50" >"$TMP/r50.log" 2>&1 || { cat "$TMP/r50.log"; fail "resnet50: one step"; }
ckpt=$TMP/r50/ckpt-00000001.h5
timeout -k 10 120 "$BUILD/hpctrain" predict --checkpoint "$ckpt" --data.path "$TMP/img.h5" --out "$TMP/pred.h5" \
  >"$TMP/pred.log" 2>&1 || { cat "$TMP/pred.log"; fail "predict"; }
timeout -k 10 120 "$BUILD/hpctrain" export --checkpoint "$ckpt" --format torch -o "$TMP/out" >"$TMP/export.log" 2>&1 ||
  { cat "$TMP/export.log"; fail "export --format torch"; }
grep -q "torchvision.safetensors (torchvision names)" "$TMP/export.log" || { cat "$TMP/export.log"; fail "no torchvision file"; }
onnx=no
if timeout -k 10 120 "$BUILD/hpctrain" export --checkpoint "$ckpt" --format onnx -o "$TMP/onnx" >"$TMP/onnx.log" 2>&1 &&
  "$PYTHON" -c "import onnx" 2>/dev/null; then onnx=yes; fi
# The validation views exactly as the loader makes them (the dump helper runs the same pipeline).
"$PYTHON" - "$TMP/img.h5" "$TMP/val" <<'EOF'
import os, sys, h5py
f, d = h5py.File(sys.argv[1], "r"), sys.argv[2]
os.makedirs(d)
o, b = f["val/offsets"][...], f["val/images"][...]
open(f"{d}/files.txt", "w").write("".join(f"64 {d}/{i}.jpg\n" for i in range(len(o) - 1)))
for i in range(len(o) - 1):
    open(f"{d}/{i}.jpg", "wb").write(bytes(b[o[i]:o[i + 1]]))
EOF
HPC_IMAGE_DUMP="$TMP/val" "$BUILD/tests/test_image_augment" --gtest_filter='*DumpForTorchvision*' >/dev/null 2>&1 || fail "val dump"
"$PYTHON" - "$TMP/img.h5" "$TMP/val" "$TMP/out" "$TMP/pred.h5" "$onnx" "$TMP/onnx/model.onnx" <<'EOF' || fail "ResNet-50 differs from torchvision's"
import importlib.util, sys
import h5py, numpy as np, torch, torch.nn.functional as F, torchvision
data, val, out, pred, onnx_ok, onnx_path = sys.argv[1:]
f = h5py.File(data, "r")
mean, std = f["val/images"].attrs["mean"], f["val/images"].attrs["std"]
n = f["val/offsets"].shape[0] - 1
u8 = np.stack([np.fromfile(f"{val}/{i}.jpg.u8", np.uint8).reshape(3, 64, 64) for i in range(n)]).astype(np.float64)
x = torch.tensor((u8 / 255 - mean[None, :, None, None]) / std[None, :, None, None], dtype=torch.float32)
ref = h5py.File(pred, "r")["logits"][...]
spec = importlib.util.spec_from_file_location("model", f"{out}/model.py")
model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model)
tv = torchvision.models.resnet50(num_classes=3)
tv.load_state_dict(model.load_safetensors(f"{out}/torchvision.safetensors"))  # strict: every name and shape
tv.eval()
net = model.build_model()
net.load_state_dict(model.load_safetensors(f"{out}/model.safetensors"))
net.eval()
def err(y):
    return float(np.abs(y - ref).max() / np.abs(ref).max())
with torch.no_grad():
    e_tv, e_py = err(tv(x).numpy()), err(net(x).numpy())
print(f"torchvision resnet50 vs predict: {e_tv:.2e}; model.py: {e_py:.2e} ({ref.size} logits, {n} images)")
assert e_tv < 1e-4 and e_py < 1e-4, (e_tv, e_py)
if onnx_ok == "yes":
    import onnx
    from onnx import numpy_helper
    m = onnx.load(onnx_path)
    onnx.checker.check_model(m, full_check=True)
    env = {"x": x, **{t.name: torch.tensor(numpy_helper.to_array(t).copy()) for t in m.graph.initializer}}
    for node in m.graph.node:
        a = {at.name: onnx.helper.get_attribute_value(at) for at in node.attribute}
        i = [env[k] for k in node.input]
        op = node.op_type
        if op == "Conv":
            p = a.get("pads", [0, 0, 0, 0])
            y = F.conv2d(i[0], i[1], i[2] if len(i) > 2 else None, a.get("strides", [1, 1]), p[:2])
        elif op == "BatchNormalization":
            y = F.batch_norm(i[0], i[3], i[4], i[1], i[2], False, 0.0, a.get("epsilon", 1e-5))
        elif op == "Relu":
            y = F.relu(i[0])
        elif op == "MaxPool":
            y = F.max_pool2d(i[0], a["kernel_shape"], a["strides"], a.get("pads", [0, 0, 0, 0])[:2])
        elif op == "Add":
            y = i[0] + i[1]
        elif op == "GlobalAveragePool":
            y = i[0].mean(dim=(2, 3), keepdim=True)
        elif op == "Flatten":
            y = i[0].reshape(i[0].shape[0], -1)
        elif op == "Gemm":
            y = F.linear(i[0], i[1], i[2] if len(i) > 2 else None)
        else:
            raise SystemExit(f"no {op} in this evaluator")
        env[node.output[0]] = y
    e_onnx = err(env[m.graph.output[0].name].numpy())
    print(f"ONNX graph ({len(m.graph.node)} nodes) vs predict: {e_onnx:.2e}")
    assert e_onnx < 1e-4, e_onnx
else:
    print("ONNX: not checked (no ONNX support in this build, or no python3-onnx)")
EOF
pass "ResNet-50: torchvision's resnet50 with the exported weights (and model.py, and the ONNX graph) gives predict's logits"
