"""Checks deploy/ and the operators' docs against the server they deploy, without a cluster
or a container engine (scripts/test.d/42-deploy.sh runs it, then promtool and the server's
--check-config on what it writes out).

Every number and path the files rely on is read from the server's sources (its flags'
defaults in main.rs, its routes in http.rs, its binary's name in Cargo.toml, its own
counters in metrics.rs), so a change there that the deployment does not follow fails here.

usage: check_deploy.py REPO OUT_DIR
  writes OUT_DIR/config/*.yaml (the ConfigMap's files, for --check-config) and
  OUT_DIR/dashboard.rules.yaml (the dashboard's queries as recording rules, for promtool).
usage: check_deploy.py --scrape REPO METRICS_FILE
  checks that every dashboard panel whose description says the server feeds it queries only
  series present in METRICS_FILE (the server's /metrics, scraped after a decision).
"""

import copy
import json
import re
import sys
import tomllib
from pathlib import Path

import kubernetes_validate
import yaml
from dockerfile_parse import DockerfileParser

# The oldest Kubernetes the manifests are for (the pre-stop `sleep` is on by default from
# 1.30), and the newest schemas kubernetes-validate bundles.
KUBERNETES = ["1.30.0", "1.37.0"]
# The server's binary, as crates/server/Cargo.toml names it and the image copies it.
BINARY = "tollgate-rls"

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def one(pattern, text, what):
    m = re.search(pattern, text)
    if not m:
        sys.exit(f"cannot find {what} in the server's sources (pattern {pattern!r})")
    return m.group(1)


def server_facts(repo):
    main = (repo / "crates/server/src/main.rs").read_text()
    http = (repo / "crates/server/src/http.rs").read_text()
    cargo = tomllib.loads((repo / "crates/server/Cargo.toml").read_text())

    def default(env):
        return one(rf'env = "{env}",\s*default_value(?:_t)? = ("[^"]*"|\w+)', main, env).strip('"')

    root = default("RUNTIME_ROOT")
    appdir = default("RUNTIME_APPDIRECTORY")
    return {
        "grpc_port": int(default("GRPC_PORT")),
        "http_port": int(default("PORT")),
        "config_dir": f"{root.rstrip('/')}/{appdir}",
        "grace_s": int(default("TOLLGATE_SHUTDOWN_GRACE_MS").replace("_", "")) / 1000,
        "routes": set(re.findall(r'\.route\(\s*"(/[^"]*)"', http)),
        "bin": [b["name"] for b in cargo.get("bin", [])],
        "counters": set(re.findall(r'&str = "(tollgate_server_\w+)";', (repo / "crates/server/src/metrics.rs").read_text())),
    }


def check_binary_name(facts):
    bins = facts["bin"]
    check(BINARY in bins, f"the server's binary {bins} is {BINARY}")


def check_dockerfile(repo, facts):
    parser = DockerfileParser(path=str(repo / "deploy/Dockerfile"))
    instructions = parser.structure
    froms = [i for i in instructions if i["instruction"] == "FROM"]
    check(len(froms) >= 2, "Dockerfile: multi-stage (a build stage, a runtime stage)")
    for f in froms:
        image = f["value"].split()[0]
        check(":" in image.split("/")[-1] and not image.endswith(":latest"), f"Dockerfile: {image} has a pinned tag")
    last = max(i["startline"] for i in froms)
    final = [i for i in instructions if i["startline"] >= last]

    def values(name):
        return [i["value"] for i in final if i["instruction"] == name]

    users = values("USER")
    uid = users[-1].split(":")[0] if users else "0"
    check(uid.isdigit() and int(uid) != 0, f"Dockerfile: the runtime stage runs as a numeric non-root user ({users})")
    volumes = " ".join(values("VOLUME"))
    check(facts["config_dir"] in volumes, f"Dockerfile: the config directory {facts['config_dir']} is a volume")
    exposed = " ".join(values("EXPOSE")).split()
    for port in (facts["grpc_port"], facts["http_port"]):
        check(str(port) in exposed, f"Dockerfile: port {port} (a server default) is exposed")
    entry = json.loads(values("ENTRYPOINT")[-1])
    copies = " ".join(values("COPY"))
    check(entry[0] == f"/usr/local/bin/{BINARY}" and copies.endswith(entry[0]), f"Dockerfile: the entrypoint {entry[0]} is the binary copied in")
    builds = " ".join(i["value"] for i in instructions if i["instruction"] == "RUN")
    check("--locked" in builds and "crates/server" in builds, "Dockerfile: the build uses the workspace's Cargo.lock (--locked)")
    return int(uid)


def validate(doc, strict=True):
    for version in KUBERNETES:
        kubernetes_validate.validate(doc, version, strict)


def check_manifests(repo, facts, uid, out):
    docs = []
    for f in sorted((repo / "deploy/kubernetes").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc:
                docs.append((f.name, doc))
                try:
                    validate(doc)
                    check(True, f"{f.name}: {doc['kind']}/{doc['metadata']['name']} valid for Kubernetes {' and '.join(KUBERNETES)} (strict)")
                except kubernetes_validate.ValidationError as e:
                    check(False, f"{f.name}: {doc['kind']}/{doc['metadata']['name']}: {e.message}")
    by = {(d["kind"], d["metadata"]["name"]): d for _, d in docs}
    dep = by[("Deployment", BINARY)]
    svc = by[("Service", BINARY)]
    cm = by[("ConfigMap", f"{BINARY}-config")]

    # The validator is not vacuous: a misspelt probe field is refused.
    bad = copy.deepcopy(dep)
    bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSecond"] = 5
    try:
        validate(bad)
        check(False, "the schema check refuses a misspelt field (periodSecond)")
    except kubernetes_validate.ValidationError:
        check(True, "the schema check refuses a misspelt field (periodSecond)")

    pod = dep["spec"]["template"]["spec"]
    (c,) = [c for c in pod["containers"] if c["name"] == BINARY]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(ports == {"grpc": facts["grpc_port"], "http": facts["http_port"]}, f"Deployment: container ports {ports} are the server's defaults")
    check(c["image"].split("/")[-1].split(":")[0] == BINARY, f"Deployment: image {c['image']}")

    def port(p):
        return ports[p] if isinstance(p, str) else p

    ready = c["readinessProbe"]["httpGet"]
    check(ready["path"] in facts["routes"] and port(ready["port"]) == facts["http_port"], f"readiness: GET {ready['path']} on {port(ready['port'])} is a route of the server's HTTP port ({sorted(facts['routes'])})")
    live = c["livenessProbe"]
    check(port(live.get("grpc", {}).get("port")) == facts["grpc_port"], "liveness: gRPC health on the server's gRPC port")
    sc, psc = c["securityContext"], pod["securityContext"]
    check(psc["runAsNonRoot"] and psc["runAsUser"] == uid, f"Deployment: runs as non-root uid {uid}, the image's USER")
    check(sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"] and sc["capabilities"]["drop"] == ["ALL"], "Deployment: read-only root, no escalation, no capabilities")
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    (name,) = [n for n, v in vols.items() if v.get("configMap", {}).get("name") == cm["metadata"]["name"]]
    check(mounts[name]["mountPath"] == facts["config_dir"] and "subPath" not in mounts[name], f"Deployment: the ConfigMap is the whole directory {facts['config_dir']}")
    stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    check(pod["terminationGracePeriodSeconds"] > stop + facts["grace_s"], f"Deployment: grace {pod['terminationGracePeriodSeconds']} s > pre-stop {stop} s + the server's {facts['grace_s']:.0f} s")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    check(svc["spec"]["selector"] == {"app": BINARY} and labels.items() >= svc["spec"]["selector"].items(), "Service: selects the Deployment's pods (app: tollgate-rls)")
    check(all(port(p["targetPort"]) == p["port"] == ports[p["name"]] for p in svc["spec"]["ports"]), "Service: each port is the container port of its name")
    check(dep["metadata"]["namespace"] == svc["metadata"]["namespace"] == cm["metadata"]["namespace"], "Deployment, Service, ConfigMap: one namespace")

    config = out / "config"
    config.mkdir(parents=True, exist_ok=True)
    for file, text in cm["data"].items():
        (config / file).write_text(text)
    return svc


def readme_yaml(repo):
    text = (repo / "crates/server/README.md").read_text()
    return [yaml.safe_load_all(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)], text


def check_readme(repo, svc):
    blocks, text = readme_yaml(repo)
    services = [d for b in blocks for d in b if isinstance(d, dict) and d.get("kind") == "Service"]
    check(len(services) == 1 and services[0] == {k: svc[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {k: svc["metadata"][k] for k in ("name", "namespace")}}, "README: the Istio example's Service is the manifest's (name, namespace, selector, ports)")
    host = f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc.cluster.local"
    grpc = [p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc"][0]
    check(f"outbound|{grpc}||{host}" in text and f"target_uri: {host}:{grpc}" in text, f"README: Istio's cluster and Envoy Gateway's target name {host}:{grpc}")
    old_name = "tollgate-" + "server"  # the crates registry's tollgate-server is another project's
    check(old_name not in text, f"README: nothing names {old_name} (the old crate and app label)")


def check_dashboard(repo, facts, out):
    dashboard = json.loads((repo / "docs/grafana/tollgate.json").read_text())
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    check(len(ids) == len(set(ids)), "dashboard: panel ids are unique")
    sources = "\n".join(p.read_text() for p in list((repo / "src").rglob("*.rs")) + [repo / "crates/server/src/metrics.rs"])
    rules = []
    for p in panels:
        check("Fed by" in p.get("description", ""), f"dashboard: panel {p['id']} says which runtimes feed it")
        for t in p["targets"]:
            for name in set(re.findall(r"\b(tollgate_\w+?)(?:_bucket|_count|_sum)?\b(?=[{\[)\s])", t["expr"])):
                if name.startswith("tollgate_server_"):
                    check(name in facts["counters"], f"dashboard: panel {p['id']}'s {name} is a counter of the server's metrics.rs")
                else:
                    check(f'"{name}"' in sources, f"dashboard: panel {p['id']}'s {name} is named in the core's sources")
            expr = t["expr"].replace("$__rate_interval", "5m").replace("$policy", ".*")
            rules.append({"record": f"dashboard:panel{p['id']}:{t['refId'].lower()}", "expr": expr})
    server = [p for p in panels if any("tollgate_server_" in t["expr"] for t in p["targets"])]
    check(len(server) >= 2, f"dashboard: {len(server)} panels of the server's own series")
    (out / "dashboard.rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))


def series_of(expr):
    """The metric names a query reads (labels and functions left out)."""
    return {m for m in re.findall(r"\b(tollgate_\w+)(?=[{\[])", expr)}


def check_scrape(repo, scraped):
    exported = set(re.findall(r"^(tollgate_\w+)[{ ]", scraped, re.M))
    print(f"the server exports {sorted(exported)}")
    dashboard = json.loads((repo / "docs/grafana/tollgate.json").read_text())
    fed = 0
    for p in dashboard["panels"]:
        # The description's "Fed by ..." sentence lists the runtimes that feed the panel.
        fed_by = re.search(r"Fed by (.*?\.)(?:\s|$)", p["description"]).group(1)
        if "tollgate-rls" not in fed_by:
            print(f"--   panel {p['id']} ({p['title']}): not fed by the server, as it says")
            continue
        if re.search(r"tollgate-rls with \w+", fed_by):
            # Fed by the server with a store this scrape (the memory store) does not have.
            print(f"--   panel {p['id']} ({p['title']}): fed by the server only with Redis, as it says")
            continue
        fed += 1
        for t in p["targets"]:
            for name in series_of(t["expr"]):
                check(name in exported, f"panel {p['id']} ({p['title']}) says the server feeds it: {name} is in its /metrics")
    check(fed >= 3, f"{fed} panels say the server feeds them")


def main():
    if sys.argv[1] == "--scrape":
        check_scrape(Path(sys.argv[2]), Path(sys.argv[3]).read_text())
        if failures:
            sys.exit(f"{len(failures)} check(s) failed")
        return
    repo, out = Path(sys.argv[1]), Path(sys.argv[2])
    facts = server_facts(repo)
    print(f"the server: gRPC {facts['grpc_port']}, HTTP {facts['http_port']}, config {facts['config_dir']}, routes {sorted(facts['routes'])}, counters {sorted(facts['counters'])}")
    check_binary_name(facts)
    uid = check_dockerfile(repo, facts)
    svc = check_manifests(repo, facts, uid, out)
    check_readme(repo, svc)
    check_dashboard(repo, facts, out)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed:\n  " + "\n  ".join(failures))
    print("all deploy checks passed")


if __name__ == "__main__":
    main()
