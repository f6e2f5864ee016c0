# Shared by scripts/cuda-build and scripts/gpu-check: what a CUDA LibTorch 2.x's CMake config
# (Caffe2/public/cuda.cmake) needs at configure time, for the Python `$1` whose torch is a CUDA
# build. Source it, then call zpipe_cuda_cmake_args PY: fills the array cuda_args with
#   - nvcc and its toolkit (FindCUDA and enable_language(CUDA) fail without them);
#   - the NVTX3 headers (some 2.x releases look for them only in PyTorch's source tree and else
#     link CUDA::nvToolsExt, which CUDA 12.9+ no longer has): the toolkit's or the nvidia-nvtx wheel's;
#   - cuDNN from the nvidia-cudnn wheel (a warning when missing; the wheels ship libcudnn.so.9
#     only, which find_library does not match);
#   - NCCL from the nvidia-nccl wheel (or $NCCL_HOME): ZPIPE_WITH_NCCL=ON with its header and
#     libnccl.so.2.
# Unused ones are ignored by CMake. Returns 1, saying why, when nvcc or NCCL is missing.
zpipe_cuda_cmake_args() {
  local py=$1 nvcc cuda_home d nccl_home nccl_lib
  # The toolkit's own nvcc: $CUDA_HOME's, /usr/local/cuda's, else the one on PATH (which may be a
  # wrapper script elsewhere, whose folder is no toolkit).
  nvcc=""
  for d in "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" /usr/local/cuda/bin/nvcc "$(command -v nvcc || true)"; do
    if [[ -n $d && -x $d ]]; then nvcc=$d; break; fi
  done
  if [[ -z $nvcc ]]; then
    echo "nvcc not found (put the CUDA toolkit's bin on PATH or set CUDA_HOME)" >&2
    return 1
  fi
  cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
  cuda_args=(-DCMAKE_CUDA_COMPILER="$nvcc" -DCUDAToolkit_ROOT="$cuda_home"
             -DCUDA_TOOLKIT_ROOT_DIR="$cuda_home")
  for d in "$cuda_home/include" "$cuda_home"/targets/*/include \
    "$("$py" -c 'import nvidia.nvtx as n; print(list(n.__path__)[0])' 2>/dev/null)/include"; do
    if [[ -d $d/nvtx3 ]]; then
      cuda_args+=(-DUSE_SYSTEM_NVTX=ON -Dnvtx3_dir="$d")
      break
    fi
  done
  d=$("$py" -c 'import nvidia.cudnn as c; print(list(c.__path__)[0])' 2>/dev/null || true)
  if [[ -n $d && -f $d/include/cudnn.h ]] && ls "$d"/lib/libcudnn.so* >/dev/null 2>&1; then
    cuda_args+=(-DCUDNN_INCLUDE_PATH="$d/include"
                -DCUDNN_LIBRARY_PATH="$(ls "$d"/lib/libcudnn.so* | head -1)")
  fi
  # Libraries Torch's targets link that a toolkit with only the compiler and runtime lacks (nvrtc,
  # cuBLAS, ...): the CUDA wheels' copies (nvidia/cu13/lib in CUDA 13's, nvidia/<lib>/lib before),
  # through FindCUDAToolkit's CUDA_<name>_LIBRARY.
  local name wheel_lib
  for name in nvrtc cublas cublasLt cufft curand cusparse cusolver nvJitLink cupti; do
    [[ -e $cuda_home/lib64/lib$name.so || -e $cuda_home/targets/x86_64-linux/lib/lib$name.so ]] && continue
    wheel_lib=$("$py" - "$name" <<'PY' 2>/dev/null || true
import glob, os, sys
import nvidia
for root in nvidia.__path__:
    hits = sorted(glob.glob(os.path.join(root, "*", "lib", "lib%s.so*" % sys.argv[1])))
    if hits:
        print(hits[0])
        break
PY
)
    [[ -n $wheel_lib ]] && cuda_args+=(-DCUDA_${name}_LIBRARY="$wheel_lib")
  done
  nccl_home=${NCCL_HOME:-$("$py" -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)}
  if [[ -z $nccl_home || ! -f $nccl_home/include/nccl.h ]]; then
    echo "NCCL not found: neither the nvidia-nccl wheel beside $py's torch nor \$NCCL_HOME has" \
      "include/nccl.h" >&2
    return 1
  fi
  nccl_lib=$(ls "$nccl_home"/lib/libnccl.so* | head -1)
  cuda_args+=(-DZPIPE_WITH_NCCL=ON -DNCCL_INCLUDE_DIR="$nccl_home/include"
              -DNCCL_LIBRARY="$nccl_lib")
  # The dynamic loader must find the wheels' CUDA libraries (cuBLAS, NCCL, ...) when the tests
  # start: torch's own RPATH covers torch, not our binaries.
  cuda_ld_path=$(dirname "$nccl_lib")
  for d in $("$py" -c 'import glob, os, nvidia; print(" ".join(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib")))))' 2>/dev/null); do
    cuda_ld_path+=":$d"
  done
}
