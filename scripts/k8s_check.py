"""Consistency checks for the Kubernetes manifests in a directory (called by
scripts/k8s-validate.sh after the schema check): the probes and ports match
the ConfigMap's gateway.toml, the Service exposes the public port only, the
grace period covers preStop + drain + grace, the admin token file comes from
the Secret, the pod runs as non-root. Prints every problem; exit 1 if any.

Usage: python k8s_check.py DIR [--emit-config FILE]
  --emit-config writes the ConfigMap's gateway.toml to FILE (for
  `aap-gateway check`).
"""
import glob
import os
import sys
import tomllib

import yaml

# Seconds the gateway allows after the grace period for blocking work
# (BLOCKING_WORK_SECS in src/cli/run.rs).
BLOCKING_WORK_SECS = 2


def load(directory):
    docs = []
    for path in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            docs.extend(d for d in yaml.safe_load_all(f) if d)
    return docs


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


def main():
    directory = sys.argv[1]
    emit = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--emit-config" else None
    docs = load(directory)
    problems = []

    def one(kind):
        found = [d for d in docs if d.get("kind") == kind]
        if len(found) != 1:
            problems.append(f"expected exactly one {kind}, found {len(found)}")
            return None
        return found[0]

    deploy, cm, svc, pdb = (
        one(k) for k in ("Deployment", "ConfigMap", "Service", "PodDisruptionBudget")
    )
    # One Secret per credential: the admin token and, with the PostgreSQL lead
    # store, its URL. Each file-sourced secret must be mounted from one of them.
    secrets = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "Secret"}
    if not secrets:
        problems.append("expected a Secret for the admin token, found none")
    if problems:
        return report(problems)
    toml_text = cm["data"]["gateway.toml"]
    cfg = tomllib.loads(toml_text)
    server = cfg["server"]
    admin_port = port_of(server["admin_listen"])
    public_port = port_of(server["listen"])
    drain = server.get("shutdown_drain_secs", 0)
    grace = server.get("shutdown_grace_secs", 5)

    pod = deploy["spec"]["template"]["spec"]
    containers = pod["containers"]
    if len(containers) != 1:
        problems.append("the gateway pod should have one container")
    c = containers[0]
    named = {p["name"]: p["containerPort"] for p in c.get("ports", [])}

    def resolve(port):
        return named.get(port) if isinstance(port, str) else port

    if named.get("admin") != admin_port:
        problems.append(f"container port `admin` is {named.get('admin')}, admin_listen is {admin_port}")
    if named.get("http") != public_port:
        problems.append(f"container port `http` is {named.get('http')}, listen is {public_port}")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c.get(probe, {}).get("httpGet")
        if not get:
            problems.append(f"{probe}: missing httpGet")
            continue
        if get.get("path") != path:
            problems.append(f"{probe}: path {get.get('path')!r}, want {path!r}")
        if resolve(get.get("port")) != admin_port:
            problems.append(
                f"{probe}: port {get.get('port')!r} is not the admin listener ({admin_port})"
            )

    # The Service: the public port only.
    targets = [resolve(p.get("targetPort", p.get("port"))) for p in svc["spec"]["ports"]]
    if admin_port in targets:
        problems.append("the Service exposes the admin port")
    if public_port not in targets:
        problems.append(f"the Service does not route to the public port {public_port}")
    if svc["spec"].get("type", "ClusterIP") != "ClusterIP":
        problems.append("the Service should be ClusterIP (put an ingress or LB in front)")

    # Shutdown budget.
    pre = c.get("lifecycle", {}).get("preStop", {})
    pre_secs = 0
    if "sleep" in pre:
        pre_secs = int(pre["sleep"]["seconds"])
    elif "exec" in pre:
        cmd = pre["exec"]["command"]
        if cmd and cmd[0].endswith("sleep"):
            pre_secs = int(cmd[-1])
    if pre_secs <= 0:
        problems.append("no preStop sleep: the pod may be killed before it leaves the endpoints")
    need = pre_secs + drain + grace + BLOCKING_WORK_SECS
    tgps = pod.get("terminationGracePeriodSeconds", 30)
    if tgps < need:
        problems.append(
            f"terminationGracePeriodSeconds {tgps} < preStop {pre_secs} + drain {drain}"
            f" + grace {grace} + {BLOCKING_WORK_SECS}"
        )

    # Config and admin token wiring.
    mounts = {m["mountPath"].rstrip("/"): m["name"] for m in c.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    cmdline = c.get("command", []) + c.get("args", [])
    if "--config" not in cmdline:
        problems.append("the container does not pass --config")
    else:
        conf = cmdline[cmdline.index("--config") + 1]
        vol = volumes.get(mounts.get(os.path.dirname(conf)), {})
        if vol.get("configMap", {}).get("name") != cm["metadata"]["name"] or os.path.basename(
            conf
        ) not in cm["data"]:
            problems.append(f"--config {conf} is not the ConfigMap's gateway.toml")
    if any(a in cmdline for a in ("--listen", "--admin-listen")):
        problems.append("--listen/--admin-listen override the ConfigMap the probes are checked against")
    def check_secret_file(key, path):
        vol = volumes.get(mounts.get(os.path.dirname(path)), {})
        name = vol.get("secret", {}).get("secretName")
        if name not in secrets:
            problems.append(f"{key} {path} is not mounted from a Secret")
            return
        secret = secrets[name]
        keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
        if os.path.basename(path) not in keys:
            problems.append(f"the Secret {name} has no key {os.path.basename(path)}")

    token_file = server.get("admin_token_file")
    if not token_file:
        problems.append("server.admin_token_file is not set: the admin listener would be locked")
    else:
        check_secret_file("admin_token_file", token_file)
    url = cfg.get("state", {}).get("postgres_url")
    if cfg.get("state", {}).get("lead_store") == "postgres":
        if isinstance(url, dict) and "file" in url:
            check_secret_file("state.postgres_url", url["file"])
        elif not (isinstance(url, dict) and "env" in url):
            problems.append("state.postgres_url is not taken from a Secret (file or env)")
    for key in ("admin_token", "cursor_secret", "bearer_token"):
        if key in toml_text.replace("admin_token_file", ""):
            problems.append(f"the ConfigMap holds {key}: secrets belong in the Secret")

    # Non-root, no privilege.
    psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
    if not (psc.get("runAsNonRoot") or csc.get("runAsNonRoot")):
        problems.append("runAsNonRoot is not set")
    if csc.get("allowPrivilegeEscalation", True):
        problems.append("allowPrivilegeEscalation is not false")
    for part in ("requests", "limits"):
        if not c.get("resources", {}).get(part):
            problems.append(f"no resource {part}")

    # The PDB selects the pods.
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    sel = pdb["spec"]["selector"]["matchLabels"]
    if any(labels.get(k) != v for k, v in sel.items()):
        problems.append("the PodDisruptionBudget does not select the gateway pods")
    if deploy["spec"].get("replicas", 1) < 2 and "minAvailable" in pdb["spec"]:
        problems.append("minAvailable with fewer than two replicas blocks every drain")

    if emit:
        with open(emit, "w", encoding="utf-8") as f:
            f.write(toml_text)
    return report(problems)


def report(problems):
    for p in problems:
        print(f"[k8s-check] FAIL: {p}", file=sys.stderr)
    if not problems:
        print("[k8s-check] probes, ports, Service, shutdown budget, Secret wiring: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
