#!/usr/bin/env bash
# install_test.sh BUILD_DIR CXX: ZeroPipe as an outside user gets it.
#   1. `cmake --install BUILD_DIR --prefix P` into a temporary directory;
#   2. configures and builds tests/install/consumer/, copied outside the tree, against P with
#      find_package(ZeroPipe) (CMAKE_PREFIX_PATH=P, nothing of the source or build tree on any path);
#   3. starts P/bin/zpipe-coordinator and two P/bin/zpipe-worker on loopback, runs the consumer (it
#      submits a synthetic p = 2 job and waits for it) and P/bin/zpipe against them;
#   4. runs P/bin/zpipe run --local, which must find the installed coordinator and workers beside it;
#   5. packs the .deb (cpack -G DEB) and checks what it holds and depends on, where dpkg-deb exists.
# Registered by tests/install.cmake (label slow: the consumer's compile is most of its ~1 min).
set -euo pipefail
build=$(cd "$1" && pwd)
cxx=$2
src=$(cd "$(dirname "$0")" && pwd)

work=$(mktemp -d /tmp/zpipe-install-test.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "install_test: $*" >&2
  for log in "$work"/*.log; do [[ -f $log ]] && { echo "--- $log" >&2; tail -20 "$log" >&2; }; done
  exit 1
}

prefix=$work/prefix
echo "== cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || fail "cmake --install failed"
for f in bin/zpipe bin/zpipe-remote bin/zpipe-coordinator bin/zpipe-worker \
         include/zeropipe/client/client.h \
         include/zeropipe/client/job_file.h include/zeropipe/core/plan.h \
         include/zeropipe/util/tls_files.h include/zeropipe/render/chrome_trace.h \
         include/zeropipe/zpipe/v1/job.pb.h lib/cmake/ZeroPipe/ZeroPipeConfig.cmake \
         lib/cmake/ZeroPipe/ZeroPipeConfigVersion.cmake share/doc/zeropipe/LICENSE; do
  [[ -e $prefix/$f ]] || fail "the install has no $f"
done
# Only the public headers: nothing private of the client, the CLI, core or util.
for f in client/internal client/cli.h client/fake_client.h core/internal util/log.h; do
  [[ ! -e $prefix/include/zeropipe/$f ]] || fail "the install exposes the private $f"
done

echo "== build a program against find_package(ZeroPipe)"
cp -r "$src/consumer" "$work/consumer"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S "$work/consumer" -B "$work/consumer-build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" >"$work/consumer-configure.log" 2>&1 ||
  fail "configuring the consumer against $prefix failed"
grep -q "ZeroPipe_DIR:PATH=$prefix/lib/cmake/ZeroPipe" "$work/consumer-build/CMakeCache.txt" ||
  fail "find_package(ZeroPipe) did not find the installed package"
cmake --build "$work/consumer-build" >"$work/consumer-build.log" 2>&1 ||
  fail "building the consumer failed"

echo "== installed coordinator and workers"
cd "$work"
"$prefix/bin/zpipe-coordinator" --listen 127.0.0.1:0 --metrics-listen "" --db :memory: \
  >"$work/coordinator.log" 2>&1 &
pids+=($!)
port=
for _ in $(seq 200); do
  port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$work/coordinator.log" | head -1)
  [[ -n $port ]] && break
  sleep 0.05
done
[[ -n $port ]] || fail "the installed zpipe-coordinator did not start serving"
address=127.0.0.1:$port
for i in 0 1; do
  "$prefix/bin/zpipe-worker" --coordinator "$address" --name "w$i" --device "cpu:$i" \
    --comm-timeout 20 >"$work/worker$i.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 300); do
  idle=$("$prefix/bin/zpipe" --coordinator "$address" workers 2>/dev/null | grep -c idle || true)
  [[ $idle == 2 ]] && break
  sleep 0.1
done
[[ $idle == 2 ]] || fail "the installed zpipe does not list 2 idle workers (got ${idle:-none})"

cat >"$work/job.yaml" <<'JOB'
name: installed-client
model:
  synthetic: {forward_ms: 5, backward_ms: 5, weight_ms: 5, activation_kb: 16}
parallel: {pipeline: 2}
schedule: {kind: zb-h1}
batch: {microbatches: 4, microbatch_size: 1}
train: {iterations: 2, lr: 0.001}
JOB
echo "== the consumer against $address"
"$work/consumer-build/consumer" "$address" "$work/job.yaml" | tee "$work/consumer.out" ||
  fail "the consumer's job did not succeed"
grep -qx "workers 2" "$work/consumer.out" || fail "the consumer did not see 2 workers"
grep -qx "plan ranks 2 first F s0 mb0" "$work/consumer.out" || fail "the consumer's plan is not p = 2"
grep -qx "plan csv rank,index,kind,stage,microbatch,peer,chunk,bucket,start,end" "$work/consumer.out" ||
  fail "the consumer did not write the plan with ZeroPipe::render"
grep -qx "job installed-client succeeded" "$work/consumer.out" || fail "the consumer's job is not succeeded"
"$prefix/bin/zpipe" --coordinator "$address" status installed-client | grep -q succeeded ||
  fail "the installed zpipe does not show the consumer's job as succeeded"

echo "== zpipe run --local from the prefix"
env -u ZPIPE_COORDINATOR_BIN -u ZPIPE_WORKER_BIN "$prefix/bin/zpipe" run "$work/job.yaml" --local \
  >"$work/run.log" 2>&1 || fail "the installed zpipe run --local failed"

if command -v dpkg-deb >/dev/null && command -v dpkg-shlibdeps >/dev/null; then
  echo "== cpack -G DEB"
  (cd "$build" && cpack -G DEB -B "$work/deb") >"$work/cpack.log" 2>&1 || fail "cpack -G DEB failed"
  deb=$(ls "$work"/deb/zeropipe_*_*.deb)
  dpkg-deb -c "$deb" | awk '{print $6}' >"$work/deb.files"
  for f in ./usr/bin/zpipe ./usr/bin/zpipe-remote ./usr/bin/zpipe-coordinator ./usr/bin/zpipe-worker \
           ./usr/share/doc/zeropipe/LICENSE ./usr/share/zeropipe/examples/gpt-zbv.yaml; do
    grep -qx -- "$f" "$work/deb.files" || fail "the .deb has no $f"
  done
  ! grep -q '^./usr/include' "$work/deb.files" || fail "the .deb holds headers (runtime only)"
  grep -q '^./usr/lib/zeropipe/libtorch_cpu.so' "$work/deb.files" ||
    fail "the .deb does not carry LibTorch's libraries in /usr/lib/zeropipe"
  dpkg-deb -f "$deb" Depends | grep -q libgrpc || fail "the .deb does not depend on gRPC"
  dpkg-deb -x "$deb" "$work/deb/root"
  "$work/deb/root/usr/bin/zpipe" --help >/dev/null || fail "the .deb's zpipe does not run"
  # zpipe hands the coordinator commands to the zpipe-remote beside it.
  "$work/deb/root/usr/bin/zpipe" version --client | grep -q '^client: zpipe' ||
    fail "the .deb's zpipe does not run zpipe-remote (zpipe version --client)"
  echo "$(basename "$deb"): $(wc -l <"$work/deb.files") entries, Depends: $(dpkg-deb -f "$deb" Depends)"
else
  echo "== no dpkg-deb/dpkg-shlibdeps here: the .deb is not checked"
fi
echo "install_test: ok"
