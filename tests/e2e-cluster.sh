#!/usr/bin/env bash
# End-to-end run against a real Kubernetes cluster (any kubeconfig: kind,
# k3d, a managed cluster). Creates a throwaway pod, round-trips a workspace
# through it with the kube backend, checks the result, deletes the pod.
# Not part of CI: no cluster can run on the CI machines.
#
#   KUBECONFIG=... just e2e-cluster            # or: tests/e2e-cluster.sh
#   IMAGE=busybox:1.36 NAMESPACE=default ...   # overrides
set -euo pipefail
cd "$(dirname "$0")/.."
NS=${NAMESPACE:-default}
IMAGE=${IMAGE:-busybox:1.36}
POD=sandbox-sync-e2e-$$
BIN=${BIN:-target/debug/sandbox-sync}
command -v kubectl >/dev/null || { echo "kubectl is required" >&2; exit 2; }
[ -x "$BIN" ] || cargo build -q -p sandbox-sync-host

cleanup() { kubectl -n "$NS" delete pod "$POD" --wait=false >/dev/null 2>&1 || true; rm -rf "$WORK"; }
WORK=$(mktemp -d)
trap cleanup EXIT

kubectl -n "$NS" run "$POD" --image="$IMAGE" --restart=Never --command -- sh -c 'mkdir -p /workspace && sleep 3600' >/dev/null
kubectl -n "$NS" wait --for=condition=Ready "pod/$POD" --timeout=120s >/dev/null
kube=(--backend kube --namespace "$NS" --pod "$POD" --remote-dir /workspace)

# A workspace with a secret, a symlink, an empty dir, odd names and a big file.
mkdir -p "$WORK/ws/src" "$WORK/ws/empty" "$WORK/ws/a b"
echo 'print(1)' > "$WORK/ws/src/main.py"
echo "it's" > "$WORK/ws/a b/it's.txt"
ln -s src/main.py "$WORK/ws/latest"
head -c 50000000 /dev/urandom > "$WORK/ws/big.bin"
echo s3cr3t > "$WORK/token"; chmod 600 "$WORK/token"
cat > "$WORK/in.json" <<JSON
[{"operationId":"in","files":[
  {"sourcePath":"$WORK/ws","targetPath":"/workspace/ws","kind":"directory"},
  {"sourcePath":"$WORK/token","targetPath":"/workspace/.config/token","kind":"file","mode":384}],
  "postUploadCommands":[{"command":"ls -la ws > ws/listing.txt; stat -c %a .config/token > ws/token-mode.txt"}]}]
JSON
"$BIN" sync-in "${kube[@]}" --ops "$WORK/in.json"
cat > "$WORK/out.json" <<JSON
[{"operationId":"out","files":[{"sourcePath":"/workspace/ws","targetPath":"$WORK/back","kind":"directory"}]}]
JSON
"$BIN" sync-out "${kube[@]}" --ops "$WORK/out.json"

cmp "$WORK/ws/big.bin" "$WORK/back/big.bin"
[ "$(readlink "$WORK/back/latest")" = src/main.py ]
[ -d "$WORK/back/empty" ]
[ "$(cat "$WORK/back/token-mode.txt")" = 600 ]
[ "$(cat "$WORK/back/a b/it's.txt")" = "it's" ]
# Confinement: a target outside the remote dir is refused before any exec.
echo '[{"operationId":"bad","files":[{"sourcePath":"'"$WORK/token"'","targetPath":"/etc/evil","kind":"file"}]}]' > "$WORK/bad.json"
if "$BIN" sync-in "${kube[@]}" --ops "$WORK/bad.json" 2>"$WORK/err"; then echo "escape accepted" >&2; exit 1; fi
grep -q 'error\[confinement\]' "$WORK/err"
echo "e2e-cluster: ok (pod $NS/$POD, image $IMAGE)"
