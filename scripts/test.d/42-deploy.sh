#!/usr/bin/env bash
# The server's deployment (deploy/) and the operators' docs, without a cluster or a container
# engine: the Kubernetes manifests against the schemas kubernetes-validate bundles (strict,
# 1.30 and 1.37), the image recipe parsed (dockerfile-parse) and checked against the server's
# sources (non-root, the config volume, the ports; the probes' paths and ports against its
# routes and defaults), the ConfigMap's files loaded by the server's --check-config, the
# alerting rules checked and unit-tested by promtool, and the dashboard's queries parsed by
# promtool; then the binary installed by the README's install line (a release build) run as
# the image runs it (uid 65532), its health route asked and its /metrics scraped for every
# series of the dashboard panels that say the server feeds them.
# The image itself is not built here: no container registry to pull its bases.
set -euo pipefail
source scripts/tools.sh
apt_packages prometheus   # promtool

# Pinned Python tools in a venv of the tools folder, rebuilt when the pins change.
venv="$TOLLGATE_TOOLS/py-deploy"
if ! cmp -s deploy/test/requirements.txt "$venv/requirements.txt" 2>/dev/null; then
  log "installing deploy/test/requirements.txt into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r deploy/test/requirements.txt
  cp deploy/test/requirements.txt "$venv/requirements.txt"
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$venv/bin/python" deploy/test/check_deploy.py . "$out"

promtool check rules deploy/prometheus/tollgate.rules.yaml
(cd deploy/prometheus && promtool test rules tollgate.rules.test.yaml)
promtool check rules "$out/dashboard.rules.yaml"

# The README's install line from a clone, as written (the fence whose tag says this suite
# runs it), into a root of its own; its build shares the workspace's target folder. What it
# installs is the binary every step below runs.
install=$(python3 - crates/server/README.md <<'PY'
import re, sys
text = open(sys.argv[1]).read()
fences = re.findall(r"^```sh no-run:[^\n]*42-deploy\.sh runs it[^\n]*\n(.*?)^```", text, re.S | re.M)
assert len(fences) == 1, "one README fence says 42-deploy.sh runs it"
print(fences[0].strip())
PY
)
echo "--- the README's install line: $install"
target=$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
CARGO_INSTALL_ROOT="$out/install" CARGO_TARGET_DIR="$target" bash -euc "$install"
bins=("$out"/install/bin/*)
[ ${#bins[@]} = 1 ] || { echo "the install line installed ${#bins[@]} binaries: ${bins[*]}"; exit 1; }
bin=${bins[0]}

# The ConfigMap's files, loaded by the server itself.
"$bin" --check-config --config-dir "$out/config"

# The binary serving that configuration as the image runs it (uid 65532, not root, the files
# read-only to it): its health route answers, and after one decision its /metrics holds every
# series of the dashboard's panels that say the server feeds them. Ports chosen by the OS.
chmod -R a+rX "$out"
run_as=()
[ "$(id -u)" = 0 ] && run_as=(setpriv --reuid 65532 --regid 65532 --clear-groups)
"${run_as[@]}" "$bin" --config-dir "$out/config" --grpc-host 127.0.0.1 --grpc-port 0 \
  --http-host 127.0.0.1 --http-port 0 > "$out/stdout" 2> "$out/stderr" &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$out"' EXIT
for _ in $(seq 100); do grep -q '^listening' "$out/stdout" && break; sleep 0.1; done
http=$(sed -n 's/^listening grpc=.* http=//p' "$out/stdout")
[ -n "$http" ] || { cat "$out/stderr"; echo "the server did not start"; exit 1; }
curl -fsS "http://$http/healthcheck"; echo " <- /healthcheck (as uid $(ps -o uid= -p $server | tr -d ' '))"
curl -sS -o /dev/null -w '%{http_code} <- /json\n' "http://$http/json" -d \
  '{"domain":"edge_proxy_per_ip","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}'
curl -fsS "http://$http/metrics" > "$out/metrics"
"$venv/bin/python" deploy/test/check_deploy.py --scrape . "$out/metrics"
