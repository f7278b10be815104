"""deploy/kubernetes renders offline (kubectl kustomize, or the kustomize scripts/build-go-tools caches where
kubectl is missing) and what it renders runs: the ConfigMap's config passes `evio config check` with the
Secret's files where the DaemonSet mounts them, and the DaemonSet gives the daemon what it needs."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE_CACHE = Path(os.environ.get("EVIO_CACHE", "/var/cache/evio"))
KUSTOMIZATIONS = ["deploy/kubernetes/base", "deploy/kubernetes/example"]


def renderer() -> list[str]:
    kubectl = shutil.which("kubectl")
    if kubectl and subprocess.run([kubectl, "kustomize", "--help"], capture_output=True, check=False).returncode == 0:
        return [kubectl, "kustomize"]
    cached = sorted(KUSTOMIZE_CACHE.glob("kustomize-*/kustomize"))
    if cached:
        return [str(cached[-1]), "build"]
    pytest.fail("neither `kubectl kustomize` nor a cached kustomize: run scripts/bootstrap")


def render(path: str) -> list[dict[str, Any]]:
    done = subprocess.run([*renderer(), str(ROOT / path)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str, prefix: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(prefix)]
    assert len(found) == 1, f"{kind} {prefix}*: {len(found)} rendered"
    return found[0]


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_the_rendered_config_passes_evio_config_check_where_the_daemonset_mounts_it(path: str, tmp_path: Path) -> None:
    docs = render(path)
    config_map = one(docs, "ConfigMap", "evio-config")
    secret = one(docs, "Secret", "evio-secret")
    daemonset = one(docs, "DaemonSet", "evio")
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    init = pod["initContainers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    init_mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}

    # The files, laid out as the pods see them (under tmp_path instead of /).
    assert volumes["template"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert volumes["secret"]["secret"]["secretName"] == secret["metadata"]["name"]
    assert "emptyDir" in volumes["config"] and init_mounts["config"] == mounts["config"]
    assert init_mounts["secret"] == mounts["secret"]
    for name, text in config_map["data"].items():
        target = tmp_path / init_mounts["template"].lstrip("/") / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    for name, data in secret["data"].items():
        target = tmp_path / mounts["secret"].lstrip("/") / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(base64.b64decode(data))
        target.chmod(volumes["secret"]["secret"]["defaultMode"])  # as the kubelet lays it out: config check checks it
    (tmp_path / mounts["config"].lstrip("/")).mkdir(parents=True)

    # The init container's own command renders this node's config (node name from the downward API).
    env = {e["name"]: e.get("value") for e in container["env"]}
    init_env = {e["name"]: e.get("value") for e in init["env"]}
    assert init_env["EVIO_CONFIG"] == env["EVIO_CONFIG"]
    assert [e for e in init["env"] if e["name"] == "NODE_NAME"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    config = tmp_path / env["EVIO_CONFIG"].lstrip("/")
    bin_dir = Path(sys.executable).parent  # `evio` as the image has it
    run_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "NODE_NAME": "worker-7.example",
               "TEMPLATE": str(tmp_path / init_env["TEMPLATE"].lstrip("/")), "EVIO_CONFIG": str(config)}
    done = subprocess.run([*init["command"], *init["args"]], env=run_env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr  # the init container ends with `evio config check`
    assert "evio-worker-7.example@example.net" in done.stdout
    assert "address from the node id in 10.254.0.0/16" in done.stdout  # no per-node address in the config

    # What `evio run` needs on a node: the host's network, TAPs, its state kept on the host.
    assert pod["hostNetwork"] is True
    assert "NET_ADMIN" in container["securityContext"]["capabilities"]["add"]
    assert volumes["tun"]["hostPath"]["path"] == "/dev/net/tun" and mounts["tun"] == "/dev/net/tun"
    assert volumes["state"]["hostPath"]["path"] == "/var/lib/evio" and mounts["state"] == "/var/lib/evio"
    assert '"state_dir": "/var/lib/evio"' in config.read_text()


def test_the_example_overlay_replaces_the_image_config_and_password_not_adds_them() -> None:
    docs = render("deploy/kubernetes/example")
    assert len([d for d in docs if d["kind"] == "ConfigMap"]) == 1
    secret = one(docs, "Secret", "evio-secret")
    assert base64.b64decode(secret["data"]["password"]) == b"example-password"
    image = one(docs, "DaemonSet", "evio")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example.net/evio:0.1"
