# Shared by scripts/bench and scripts/bench.d/*: build benchmark targets in the existing build
# tree, never reconfiguring it. The tree is shared (tests, other engineers' builds): a bench that
# ran `cmake -S . -B build -DCMAKE_BUILD_TYPE=...` changed its configuration under everyone and
# rebuilt it all. Only a folder with no CMakeCache.txt yet is configured, once, as Release.
# Source it, then: zpipe_bench_build TARGET...   (uses $BUILD_DIR, default build; $JOBS)
zpipe_bench_build() {
  local dir=${BUILD_DIR:-build}
  if [[ ! -f $dir/CMakeCache.txt ]]; then
    echo "bench: $dir is not configured yet; configuring it once (Release)" >&2
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$dir" -j "${JOBS:-$(nproc)}" --target "$@"
}
