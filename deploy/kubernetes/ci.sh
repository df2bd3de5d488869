#!/usr/bin/env bash
# Renders every overlay under deploy/kubernetes/overlays with `kubectl
# kustomize` and validates it offline (validate.py: the Kubernetes schemas
# bundled by kubernetes-validate, subset schemas for ServiceMonitor and
# ScaledObject, and the checks no schema makes); then renders each
# deliberately bad manifest under tests/ and checks that validation refuses
# it with the message its `expect` file names. Called by .ci/run; ends with
# one line, `kubernetes: ok (...)`, `kubernetes: FAILED (...)`, or
# `kubernetes: SKIPPED (...)` when no kubectl with kustomize v4+ is at hand.
set -euo pipefail
cd "$(dirname "$0")"
t0=$SECONDS
target=$(mkdir -p "${CARGO_TARGET_DIR:-../../target}" && cd "${CARGO_TARGET_DIR:-../../target}" && pwd)
work=$target/kubernetes
mkdir -p "$work"
fail() { echo "kubernetes: FAILED ($*)"; exit 1; }
# The machine lacks a tool this check needs: said, and the run goes on.
skip() { echo "kubernetes: SKIPPED ($*)"; exit 0; }

# kubectl with kustomize v4 or later (components). Debian packages kubectl
# as kubernetes-client, but bookworm's (1.20) carries kustomize v2, which
# cannot read these files: say so rather than render them wrong.
if ! command -v kubectl >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y -qq kubernetes-client >/dev/null 2>&1 ||
    skip "no kubectl, and apt-get could not install kubernetes-client"
fi
kustomize_version=$(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\{0,1\}//p')
case $kustomize_version in
  [4-9].*) ;;
  *) skip "kubectl $(kubectl version --client 2>/dev/null | grep -o 'v[0-9]*\.[0-9]*\.[0-9]*' | head -1) has kustomize '${kustomize_version:-unknown}'; these manifests need v4 or later (components)" ;;
esac

venv=$work/venv
if ! "$venv/bin/python" -c 'import kubernetes_validate' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --retries 5 -r requirements.txt >"$work/pip.log" 2>&1 ||
    { tail -5 "$work/pip.log"; fail "pip could not install requirements.txt"; }
fi

rendered=()
for dir in overlays/*/; do
  name=$(basename "$dir")
  out=$work/$name.yaml
  kubectl kustomize "$dir" >"$out" 2>"$work/$name.err" || { cat "$work/$name.err"; fail "kubectl kustomize $dir"; }
  "$venv/bin/python" validate.py "$out" | sed 's/^/  /' || fail "overlay $name does not validate (above)"
  rendered+=("$name $(grep -c '^kind:' "$out")")
done

refused=0
for dir in tests/*/; do
  name=$(basename "$dir")
  out=$work/bad-$name.yaml
  kubectl kustomize "$dir" >"$out" 2>"$work/bad-$name.err" || { cat "$work/bad-$name.err"; fail "kubectl kustomize $dir"; }
  want=$(cat "$dir/expect")
  if msg=$("$venv/bin/python" validate.py "$out"); then
    fail "the bad manifest $name passed validation"
  fi
  grep -F -q -- "$want" <<<"$msg" || { echo "$msg"; fail "the bad manifest $name was refused, but not with: $want"; }
  echo "  refused $name: $(grep -F -- "$want" <<<"$msg" | head -1 | sed 's/^[^:]*: //')"
  refused=$((refused + 1))
done
[ "$refused" -gt 0 ] || fail "no bad manifest was tested"

echo "kubernetes: ok (kustomize $kustomize_version; $(IFS=,; echo "${rendered[*]}" | sed 's/,/, /g') objects rendered and valid; $refused bad manifests refused; $((SECONDS - t0)) s)"
