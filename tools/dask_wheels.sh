#!/usr/bin/env bash
# Wheels for the GPU machine, which has CuPy but no Dask and no package registry: run here (a machine that reaches
# PyPI), carry .whl to the device call, and install there with
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl [.whl/ucx/*.whl]
# .whl/      dask, distributed and dask-cuda at the versions dask-cuda pins, and the few pure-Python packages the
#            GPU machine's image lacks (the rest of their needs is installed there).
# .whl/ucx/  UCX for dask-cuda's "ucx" protocol (NVLink between workers): distributed-ucxx and what it loads, with
#            libucx's static libraries, test programs and headers left out so that the whole stays within a device
#            call's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
DASK_CUDA=${DASK_CUDA:-26.10}
UCXX=${UCXX:-0.52}
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64 any; do platforms+=(--platform "$p"); done
get() {  # get DIR SPEC...
  local dir=$1; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$dir" "$@"
}
mkdir -p .whl/ucx
get .whl "dask-cuda==$DASK_CUDA.*" "rapids-dask-dependency==$DASK_CUDA.*"
pin=$(unzip -p .whl/rapids_dask_dependency-*.whl '*/METADATA' | sed -n 's/^Requires-Dist: dask<[^,]*,>=\([0-9.]*\).*/\1/p')
get .whl "dask==$pin" "distributed==$pin" partd locket tblib zict tornado
get .whl/ucx "distributed-ucxx-cu13==$UCXX.*" "ucxx-cu13==$UCXX.*" "libucxx-cu13==$UCXX.*" "rmm-cu13==$DASK_CUDA.*" \
    "librmm-cu13==$DASK_CUDA.*" "rapids-logger==0.3.*" "libucx-cu13>=1.19,<1.22"

# libucx, slimmed: the shared libraries the loader and UCX's module loader open (lib*.so, lib*.so.0), nothing else.
wheel=$(ls .whl/ucx/libucx_cu13-*.whl)
work=$(mktemp -d)
unzip -q "$wheel" -d "$work"
find "$work/libucx" \( -name '*.a' -o -name '*.la' -o -name '*.so.0.0.0' -o -name 'libucx_perftest*' \) -delete
rm -rf "$work/libucx/bin" "$work/libucx/include" "$work/libucx/lib/cmake" "$work/libucx/lib/pkgconfig"
python3 - "$work" <<'EOF'
import base64, hashlib, os, sys
root = sys.argv[1]
record = next(d for d in os.listdir(root) if d.endswith(".dist-info")) + "/RECORD"
rows = []
for folder, _, files in os.walk(root):
    for f in files:
        path = os.path.relpath(os.path.join(folder, f), root)
        if path != record:
            data = open(os.path.join(root, path), "rb").read()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{path},sha256={digest},{len(data)}")
open(os.path.join(root, record), "w").write("\n".join(rows + [record + ",,"]) + "\n")
EOF
rm "$wheel"
(cd "$work" && zip -q -r -9 "$OLDPWD/$wheel" .)
rm -rf "$work"
du -sh .whl .whl/ucx
