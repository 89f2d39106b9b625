"""Schema-level checks of deploy/ (no Docker, no cluster, no network)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from ragstream.cli import app
from ragstream.core.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
YAML_FILES = sorted(DEPLOY.rglob("*.yaml"))
KNOWN_ENV = {
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "TOKENIZERS_PARALLELISM",
    "OTEL_SERVICE_NAME",
}
SUBCOMMANDS = {
    (c.name or c.callback.__name__).replace("_", "-")  # type: ignore[union-attr]
    for c in app.registered_commands
}


def _settings_env(model: type[BaseModel], prefix: str = "RAGSTREAM_") -> set[str]:
    names = set()
    for name, field in model.model_fields.items():
        names.add(prefix + name.upper())
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            names |= _settings_env(sub, f"{prefix}{name.upper()}__")
    return names


SETTINGS_ENV = _settings_env(Settings)


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d is not None]


def _k8s_objects() -> list[dict[str, Any]]:
    return [d for p in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in _docs(f"k8s/{p.name}")]


def _check_env_name(name: str) -> None:
    assert name in SETTINGS_ENV or name in KNOWN_ENV, f"unknown env var {name}"


def _check_command(cmd: list[str]) -> None:
    assert cmd and all(isinstance(a, str) for a in cmd)
    assert cmd[0] in SUBCOMMANDS, f"{cmd[0]!r} is not a ragstream subcommand"


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_parses(path: Path) -> None:
    assert [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def test_compose_services() -> None:
    (compose,) = _docs("compose.yaml")
    services = compose["services"]
    assert {"qdrant", "otel-collector", "jaeger", "sync-0", "sync-1", "query"} <= set(services)
    for svc in services.values():
        assert "image" in svc or "build" in svc
        for port in svc.get("ports", []):
            assert isinstance(port, int) or re.fullmatch(r"\d+:\d+", port), port
    assert "query-init" not in services  # stateless query side: no index to rebuild
    for name in ("sync-0", "sync-1", "query"):
        svc = services[name]
        _check_command(svc["command"])
        env = svc["environment"]
        assert env["RAGSTREAM_STORE__VECTOR_BACKEND"] == "qdrant"
        assert env["RAGSTREAM_STORE__QDRANT_URL"] == "http://qdrant:6333"
        assert env["RAGSTREAM_STORE__LEXICAL_BACKEND"] == "sparse"
        assert env["RAGSTREAM_TELEMETRY__OTLP_ENDPOINT"].startswith("http://otel-collector:4318/")
        for key, value in env.items():
            _check_env_name(key)
            assert isinstance(value, str)
    assert "8765:8765" in services["query"]["ports"]
    workers = [services["sync-0"], services["sync-1"]]  # scale-out ingest: one share each
    shares = {(w["environment"]["RAGSTREAM_SYNC__PARTITION_INDEX"],
               w["environment"]["RAGSTREAM_SYNC__PARTITION_COUNT"]) for w in workers}  # fmt: skip
    assert shares == {("0", "2"), ("1", "2")}
    data_volumes = [{v.split(":")[0] for v in w["volumes"]} - {"./docs"} for w in workers]
    for worker, own in zip(workers, data_volumes, strict=True):
        assert worker["command"][:2] == ["watch", "/docs"]
        assert "./docs:/docs:ro" in worker["volumes"]
        others = [v for v in data_volumes if v is not own] + [
            {v.split(":")[0] for v in services["query"].get("volumes", [])}
        ]
        assert all(own.isdisjoint(o) for o in others), "each sync data dir has one owner"


def test_otel_collector_pipeline() -> None:
    (cfg,) = _docs("otel-collector.yaml")
    assert cfg["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    traces = cfg["service"]["pipelines"]["traces"]
    assert traces["receivers"] == ["otlp"]
    for exporter in traces["exporters"]:
        assert exporter in cfg["exporters"]
        assert cfg["exporters"][exporter]["endpoint"].startswith("jaeger:")


def test_k8s_objects() -> None:
    objs = _k8s_objects()
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objs:
        assert obj["apiVersion"] and obj["kind"] and obj["metadata"]["name"]
        by_kind.setdefault(obj["kind"], []).append(obj)
    (cm,) = by_kind["ConfigMap"]
    for key, value in cm["data"].items():
        _check_env_name(key)
        assert isinstance(value, str)
    (sts,) = by_kind["StatefulSet"]
    assert sts["spec"]["serviceName"] and sts["spec"]["volumeClaimTemplates"]
    (sync,) = sts["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in sync["env"]}
    assert sts["spec"]["replicas"] == int(env["RAGSTREAM_SYNC__PARTITION_COUNT"]["value"]) >= 2
    ordinal = env["RAGSTREAM_SYNC__PARTITION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert ordinal == "metadata.labels['apps.kubernetes.io/pod-index']"
    workloads = [sts, *by_kind["Deployment"]]
    for wl in workloads:
        labels = wl["spec"]["template"]["metadata"]["labels"]
        assert wl["spec"]["selector"]["matchLabels"].items() <= labels.items()
        pod = wl["spec"]["template"]["spec"]
        for c in pod.get("initContainers", []) + pod["containers"]:
            _check_command(c["args"])
            assert c["resources"]["requests"] and c["resources"]["limits"]
            for port in c.get("ports", []):
                assert isinstance(port["containerPort"], int)
            for env in c.get("env", []):
                _check_env_name(env["name"])
                assert isinstance(env.get("value"), str) or "fieldRef" in env["valueFrom"]
            for ref in c.get("envFrom", []):
                assert ref["configMapRef"]["name"] == cm["metadata"]["name"]
    deployments = {d["metadata"]["name"]: d for d in by_kind["Deployment"]}
    for svc in by_kind["Service"]:
        target = deployments.get(svc["metadata"]["name"]) or sts
        labels = target["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= labels.items()
        for port in svc["spec"].get("ports", []):
            assert isinstance(port["port"], int)
    query_pod = deployments["ragstream-query"]["spec"]["template"]["spec"]
    query = query_pod["containers"][0]
    assert query["args"][0] == "serve" and query["ports"][0]["containerPort"] == 8765
    assert "initContainers" not in query_pod  # no lexical index to rebuild before serving
    assert cm["data"]["RAGSTREAM_STORE__LEXICAL_BACKEND"] == "sparse"


def test_qdrant_values() -> None:
    (values,) = _docs("qdrant-values.yaml")
    assert values["replicaCount"] == 3
    assert values["config"]["cluster"]["enabled"] is True
    assert values["persistence"]["size"]
    assert {p["port"] for p in values["service"]["ports"]} >= {6333, 6334, 6335}


def test_dockerfile() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim", text, re.M)
    assert re.search(r"^ENTRYPOINT \[\"ragstream\"\]", text, re.M)
    assert "torch==2.13.0" in text and "download.pytorch.org/whl/cpu" in text
    assert "pip install -r requirements.txt" in text and "pip install --no-deps ." in text
    # the default embedder's ONNX export is made in the image, before it drops root
    export = text.index("python -m ragstream.operators.onnx_export")
    assert text.index("pip install --no-deps .") < export < text.index("\nUSER ")
    assert "HF_HUB_OFFLINE=1" in text and "TRANSFORMERS_OFFLINE=1" in text
    assert re.search(r"^USER (?!root|0\b)", text, re.M)
    assert 'VOLUME ["/data"]' in text
    for name in re.findall(r"\b(RAGSTREAM_[A-Z_]+)=", text):
        _check_env_name(name)


def test_every_ragstream_var_in_deploy_is_a_setting() -> None:
    files = [*YAML_FILES, DEPLOY / "Dockerfile"]
    used = {m for p in files for m in re.findall(r"\bRAGSTREAM_[A-Z0-9_]+", p.read_text())}
    assert used and used <= SETTINGS_ENV, used - SETTINGS_ENV
