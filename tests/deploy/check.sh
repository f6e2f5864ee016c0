#!/usr/bin/env bash
# Offline checks of deploy/ (no cluster needed). ctest runs each as its own test (tests/deploy.cmake).
#
#   tests/deploy/check.sh [CHECK...]     CHECK: setup render schema reject policy golden dashboards
#                                        docker
#                                        (default: all of them, in that order)
#   UPDATE_GOLDEN=1 tests/deploy/check.sh golden    rewrite tests/deploy/golden/ from deploy/
#
#   render      `kubectl kustomize` renders deploy/base and every deploy/overlays/*, without a
#               warning (a deprecated field such as commonLabels warns)
#   schema      every rendered object, and every deploy/examples/*.yaml, passes strict schema
#               validation (kubernetes-models; unknown fields rejected)
#   reject      the validator rejects each tests/deploy/fixtures/reject-*.yaml where it should;
#               each tests/deploy/fixtures/policy-reject-*/ (a kustomization over an overlay)
#               renders, and the policy check rejects it for its "# expect-violation:" reasons
#   policy      resources, probes, non-root, ports, headless Service, PDBs, GPUs, pinned images,
#               tokens from Secrets (no --insecure, no plain-text token), the coordinator's
#               NetworkPolicy, no Secret in a production overlay (every overlay but *-dev);
#               claims the workers mount are shareable (ReadOnlyMany/ReadWriteMany), read-only
#               when ReadOnlyMany and under a --data-root; shared-volume has a data and a
#               checkpoint claim;
#               then each policy is broken on purpose once and must be caught
#   golden      the rendered overlays equal tests/deploy/golden/<overlay>.yaml exactly
#   dashboards  deploy/base/monitoring/generated/ matches dashboards/ (deploy/sync-dashboards)
#   docker      deploy/docker/Dockerfile.*: pinned base images, multi-stage, builder uses
#               scripts/setup, final stage non-root with runtime packages only; the overlays'
#               image tags are the ones the Dockerfiles say they build
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

kubectl_bin() {
  local candidate
  for candidate in "${KUBECTL:-}" "$(command -v kubectl || true)" "$here/.tools/kubectl"; do
    if [[ -n $candidate ]] && "$candidate" version --client 2>/dev/null | grep -q '^Kustomize Version: v5\.'; then
      echo "$candidate"
      return
    fi
  done
  echo "check.sh: no kubectl with kustomize v5; run tests/deploy/setup" >&2
  return 1
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

overlays() { (cd "$root/deploy/overlays" && for d in */; do [[ -f $d/kustomization.yaml ]] && echo "${d%/}"; done); }

# render_all: deploy/base and each overlay into $out/<name>.yaml; fails on errors and warnings.
render_all() {
  local kubectl name dir
  kubectl=$(kubectl_bin)
  for name in base $(overlays); do
    dir=$root/deploy/overlays/$name
    [[ $name == base ]] && dir=$root/deploy/base
    if ! "$kubectl" kustomize "$dir" >"$out/$name.yaml" 2>"$out/$name.err"; then
      echo "render: kubectl kustomize ${dir#"$root"/} failed:" >&2
      cat "$out/$name.err" >&2
      return 1
    fi
    if [[ -s $out/$name.err ]]; then
      echo "render: kubectl kustomize ${dir#"$root"/} warned:" >&2
      cat "$out/$name.err" >&2
      return 1
    fi
    if ! grep -q '^kind: ' "$out/$name.yaml"; then
      echo "render: ${dir#"$root"/} rendered no objects" >&2
      return 1
    fi
  done
}

check_render() {
  render_all
  echo "render: base and overlays ($(overlays | tr '\n' ' ')) render without warnings"
}

check_schema() {
  render_all
  node "$here/check.mjs" schema "$out"/*.yaml "$root"/deploy/examples/*.yaml
}

check_reject() {
  node "$here/check.mjs" reject "$here"/fixtures/reject-*.yaml
  local kubectl dir name
  kubectl=$(kubectl_bin)
  for dir in "$here"/fixtures/policy-reject-*/; do
    dir=${dir%/}
    name=$(basename "$dir")
    if ! "$kubectl" kustomize "$dir" >"$out/$name.yaml" 2>"$out/$name.err" || [[ -s $out/$name.err ]]; then
      echo "reject: kubectl kustomize ${dir#"$root"/} failed or warned:" >&2
      cat "$out/$name.err" >&2
      return 1
    fi
    node "$here/check.mjs" policy-reject "$dir/kustomization.yaml" "$out/$name.yaml"
  done
}

check_policy() {
  render_all
  local name flags
  for name in $(overlays); do
    flags=()
    [[ $name == gpu ]] && flags+=(--gpu)
    [[ $name == shared-volume ]] && flags+=(--shared-volume)
    [[ $name == *-dev ]] || flags+=(--prod)
    node "$here/check.mjs" policy "${flags[@]}" "$out/$name.yaml"
  done
  node "$here/check.mjs" policy "$root"/deploy/examples/*.yaml
  [[ -f $out/gpu.yaml ]] || { echo "policy: there is no deploy/overlays/gpu" >&2; return 1; }
  [[ -f $out/shared-volume.yaml ]] || { echo "policy: there is no deploy/overlays/shared-volume" >&2; return 1; }
  node "$here/check.mjs" policy-selftest "$out/cpu-dev.yaml" "$out/gpu.yaml" "$out/shared-volume.yaml"
}

check_golden() {
  render_all
  local name status=0
  if [[ ${UPDATE_GOLDEN:-0} == 1 ]]; then
    rm -f "$here"/golden/*.yaml
    for name in $(overlays); do cp "$out/$name.yaml" "$here/golden/$name.yaml"; done
    echo "golden: rewrote tests/deploy/golden/ ($(overlays | tr '\n' ' '))"
    return
  fi
  for name in $(overlays); do
    if [[ ! -f $here/golden/$name.yaml ]]; then
      echo "golden: no tests/deploy/golden/$name.yaml for deploy/overlays/$name" >&2
      status=1
    elif ! diff -u "$here/golden/$name.yaml" "$out/$name.yaml" >"$out/$name.diff"; then
      echo "golden: deploy/overlays/$name renders differently from tests/deploy/golden/$name.yaml:" >&2
      head -80 "$out/$name.diff" >&2
      status=1
    fi
  done
  for golden in "$here"/golden/*.yaml; do
    name=$(basename "$golden" .yaml)
    if [[ ! -f $root/deploy/overlays/$name/kustomization.yaml ]]; then
      echo "golden: tests/deploy/golden/$name.yaml has no overlay deploy/overlays/$name" >&2
      status=1
    fi
  done
  if ((status)); then
    echo "golden: if the change is intended: UPDATE_GOLDEN=1 tests/deploy/check.sh golden" \
         "(rendered with $("$(kubectl_bin)" version --client | grep Kustomize))" >&2
    return 1
  fi
  echo "golden: $(overlays | tr '\n' ' ')match"
}

check_dashboards() {
  "$root/deploy/sync-dashboards" --check
  echo "dashboards: deploy/base/monitoring/generated/ matches its sources"
}

check_docker() {
  local file status=0 final
  for file in "$root"/deploy/docker/Dockerfile.*; do
    [[ $file == *.dockerignore ]] && continue
    local f=${file#"$root"/}
    grep -qE '^FROM .* AS builder$' "$file" || { echo "docker: $f has no builder stage" >&2; status=1; }
    ((($(grep -c '^FROM ' "$file")) >= 2)) || { echo "docker: $f is not multi-stage" >&2; status=1; }
    grep -q 'scripts/setup' "$file" || { echo "docker: $f does not install through scripts/setup" >&2; status=1; }
    # Base images: each ARG default or FROM that names an image has a tag other than latest.
    while read -r image; do
      if [[ $image != *:* || $image == *:latest ]]; then echo "docker: $f: base image $image is not pinned" >&2; status=1; fi
    done < <(sed -nE 's/^ARG [A-Z_]*IMAGE=(.*)$/\1/p; s/^FROM ([^$ ]+)( AS .*)?$/\1/p' "$file")
    final=$(awk '/^FROM /{stage=""} {stage=stage $0 "\n"} END{printf "%s", stage}' "$file")
    if ! grep -qE '^USER [1-9][0-9]*(:[1-9][0-9]*)?$' <<<"$final"; then
      echo "docker: $f: the final stage does not switch to a non-root USER uid" >&2; status=1
    fi
    if grep -E 'scripts/setup|cmake|ninja|build-essential|g\+\+|gcc|-dev( |$)' <<<"$final" | grep -v '^#' >&2; then
      echo "docker: $f: the final stage installs build tools (above)" >&2; status=1
    fi
    if grep -E 'apt-get install' <<<"$final" | grep -vq 'xargs -a /tmp/runtime-packages.txt'; then
      echo "docker: $f: the final stage installs packages other than runtime-packages.txt" >&2; status=1
    fi
  done
  local overlay flavour tag
  for overlay in cpu-dev:cpu gpu:cuda; do
    flavour=${overlay#*:} overlay=${overlay%%:*}
    tag=$(sed -nE 's/^ +newTag: (.*)$/\1/p' "$root/deploy/overlays/$overlay/kustomization.yaml")
    if ! grep -qE "^#.*docker build .*-t [^ ]+:$tag " "$root/deploy/docker/Dockerfile.$flavour"; then
      echo "docker: deploy/overlays/$overlay uses tag '$tag', which deploy/docker/Dockerfile.$flavour does not build" >&2
      status=1
    fi
  done
  ((status == 0)) && echo "docker: Dockerfiles are multi-stage, pinned, non-root; overlay tags match"
  return $status
}

checks=("$@")
((${#checks[@]})) || checks=(setup render schema reject policy golden dashboards docker)
for check in "${checks[@]}"; do
  case $check in
    setup) "$here/setup" ;;
    render | schema | reject | policy | golden | dashboards | docker) "check_$check" ;;
    *) echo "check.sh: unknown check '$check'" >&2; exit 2 ;;
  esac
done
