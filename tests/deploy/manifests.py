"""Helpers for tests/deploy.rs, run with target/deploy-venv's Python (PyYAML).

    manifests.py render OVERLAY_DIR OUT_FILE   render a kustomization without kustomize
    manifests.py same RENDERED_A RENDERED_B    exit 1 unless both hold the same objects
    manifests.py facts RENDERED_FILE           print facts about the tickd sidecar
    manifests.py policies RENDERED_FILE        print facts about the NetworkPolicies that
                                               select tickd's Pods, and tickd's args
    manifests.py secret FILE NAME KEY          print the value of KEY in Secret NAME

The renderer supports only what deploy/ uses -- `resources`, `images` and `labels`
(without selectors or templates) -- and fails on anything else, so it cannot silently
drift from kustomize. When kustomize (or kubectl) is installed the Rust test also renders
with it and checks with `same` that both agree.

Facts are printed one per line as tab-separated fields (the Rust test has no YAML or JSON
parser); values containing tabs or newlines are refused.
"""

import base64
import sys
from pathlib import Path

import yaml

KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "images", "labels"}
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def fail(message):
    print(f"manifests.py: {message}", file=sys.stderr)
    sys.exit(2)


def load_all(path):
    with open(path, encoding="utf-8") as file:
        return [doc for doc in yaml.safe_load_all(file) if doc is not None]


def split_image(image):
    """`name[:tag][@digest]` -> (name, tag, digest)."""
    rest, _, digest = image.partition("@")
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        return rest[:colon], rest[colon + 1 :], digest
    return rest, "", digest


def containers(node):
    """Every container object anywhere under `node` (pod specs, templates, ...)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in CONTAINER_LISTS and isinstance(value, list):
                yield from (c for c in value if isinstance(c, dict))
            else:
                yield from containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from containers(item)


def set_images(docs, images):
    for entry in images:
        unknown = set(entry) - {"name", "newName", "newTag", "digest"}
        if unknown:
            fail(f"unsupported images fields {sorted(unknown)}")
        for doc in docs:
            for container in containers(doc):
                name, tag, digest = split_image(container.get("image", ""))
                if name != entry["name"]:
                    continue
                name = entry.get("newName", name)
                if "digest" in entry:
                    tag, digest = "", entry["digest"]
                elif "newTag" in entry:
                    tag, digest = str(entry["newTag"]), ""
                container["image"] = (
                    name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
                )


def set_labels(docs, labels):
    for entry in labels:
        unknown = set(entry) - {"pairs", "includeSelectors", "includeTemplates"}
        if unknown or entry.get("includeSelectors") or entry.get("includeTemplates"):
            fail(f"unsupported labels entry {entry}")
        for doc in docs:
            metadata = doc.setdefault("metadata", {})
            metadata.setdefault("labels", {}).update(
                {key: str(value) for key, value in entry["pairs"].items()}
            )


def build(directory):
    directory = Path(directory)
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - KUSTOMIZATION_KEYS
    if unknown:
        fail(
            f"{directory}/kustomization.yaml uses {sorted(unknown)}; this renderer only "
            f"knows {sorted(KUSTOMIZATION_KEYS)}"
        )
    docs = []
    for resource in kustomization.get("resources", []):
        path = directory / resource
        docs.extend(build(path) if path.is_dir() else load_all(path))
    set_labels(docs, kustomization.get("labels", []))
    set_images(docs, kustomization.get("images", []))
    return docs


def identity(doc):
    metadata = doc.get("metadata", {})
    return (
        doc.get("apiVersion", ""),
        doc.get("kind", ""),
        metadata.get("namespace", ""),
        metadata.get("name", ""),
    )


def render(overlay, out):
    docs = build(overlay)
    seen = set()
    for doc in docs:
        if identity(doc) in seen:
            fail(f"{overlay}: duplicate object {identity(doc)}")
        seen.add(identity(doc))
    with open(out, "w", encoding="utf-8") as file:
        yaml.safe_dump_all(docs, file, sort_keys=True)


def same(left, right):
    def keyed(path):
        return {identity(doc): doc for doc in load_all(path)}

    a, b = keyed(left), keyed(right)
    if a == b:
        return
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            print(f"differs: {key}\n--- {left}\n{yaml.safe_dump(a.get(key))}"
                  f"--- {right}\n{yaml.safe_dump(b.get(key))}", file=sys.stderr)
    sys.exit(1)


def emit(*fields):
    text = [str(field) for field in fields]
    if any("\t" in field or "\n" in field for field in text):
        fail(f"fact with a tab or newline: {text}")
    print("\t".join(text))


def yaml_scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else value


def facts(rendered):
    docs = load_all(rendered)
    config_maps = {
        doc["metadata"]["name"]: doc.get("data", {})
        for doc in docs
        if doc.get("kind") == "ConfigMap"
    }
    doc, pod = tickd_workload(docs)
    emit("workload", doc["kind"], doc["metadata"]["name"])
    emit("grace", pod.get("terminationGracePeriodSeconds", 30))
    pod_security = pod.get("securityContext", {})

    in_init = [c for c in pod.get("initContainers", []) if c.get("name") == "tickd"]
    in_main = [c for c in pod.get("containers", []) if c.get("name") == "tickd"]
    emit("in_init_containers", yaml_scalar(bool(in_init)))
    emit("in_containers", yaml_scalar(bool(in_main)))
    tickd = (in_init + in_main)[0]
    emit("restart_policy", tickd.get("restartPolicy", ""))
    emit("image", tickd.get("image", ""))
    emit("working_dir", tickd.get("workingDir", ""))
    # The memory limit tickd's default --max-memory follows (empty: none set).
    emit("memory_limit", tickd.get("resources", {}).get("limits", {}).get("memory", ""))
    if "command" in tickd:
        emit("command", *tickd["command"])

    security = tickd.get("securityContext", {})
    for field in ("runAsNonRoot", "runAsUser", "runAsGroup"):
        value = security.get(field, pod_security.get(field))
        emit("security", field, yaml_scalar(value))
    for field in ("allowPrivilegeEscalation", "readOnlyRootFilesystem"):
        emit("security", field, yaml_scalar(security.get(field)))
    emit("security", "capabilitiesDrop", *security.get("capabilities", {}).get("drop", []))

    for arg in tickd.get("args", []):
        emit("arg", arg)
    # Effective environment, as the kubelet builds it: envFrom first, then env on top.
    env = {}
    for source in tickd.get("envFrom", []):
        if set(source) != {"configMapRef"}:
            fail(f"envFrom source {source} not supported by this test")
        name = source["configMapRef"]["name"]
        if name not in config_maps:
            fail(f"envFrom names ConfigMap {name}, which the overlay does not define")
        env.update({key: str(value) for key, value in config_maps[name].items()})
    for item in tickd.get("env", []):
        if "value" not in item:
            fail(f"env {item.get('name')} has no literal value; not supported by this test")
        env[item["name"]] = str(item["value"])
    for name, value in env.items():
        emit("env", name, value)

    for kind in ("startup", "readiness", "liveness"):
        probe = tickd.get(f"{kind}Probe")
        if probe is None:
            continue
        handler = next(k for k in ("grpc", "httpGet", "tcpSocket", "exec") if k in probe)
        emit("probe", kind, "handler", handler)
        if handler == "grpc":
            port = probe["grpc"]["port"]
            emit("probe", kind, "port", port if isinstance(port, int) else f"named:{port}")
            emit("probe", kind, "service", probe["grpc"].get("service", ""))

    for port in tickd.get("ports", []):
        emit("port", port.get("name", ""), port["containerPort"])

    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    claims = {
        claim["metadata"]["name"]
        for claim in doc.get("spec", {}).get("volumeClaimTemplates", [])
    }
    for mount in tickd.get("volumeMounts", []):
        volume = volumes.get(mount["name"])
        if volume is not None:
            source = next(key for key in volume if key != "name")
        elif mount["name"] in claims:
            source = "persistentVolumeClaim"
        else:
            fail(f"volumeMount {mount['name']} has no volume")
        emit("mount", mount["mountPath"], source, yaml_scalar(mount.get("readOnly", False)))


def tickd_workload(docs):
    """The one workload whose pod template runs a container named tickd: (doc, pod spec)."""
    workloads = []
    for doc in docs:
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        names = [c.get("name") for c in pod.get("initContainers", []) + pod.get("containers", [])]
        if "tickd" in names:
            workloads.append((doc, pod))
    if len(workloads) != 1:
        fail(f"expected one workload with a tickd container, found {len(workloads)}")
    return workloads[0]


def selects(selector, labels):
    if set(selector) - {"matchLabels"}:
        fail(f"podSelector {selector} not supported by this test (matchLabels only)")
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def policies(rendered):
    """Facts about the NetworkPolicies selecting tickd's Pods, one rule port per line:
    `ingress|egress POLICY PORT PROTOCOL PEERS`, PEERS the number of from/to peers (0: anyone),
    PORT `*` for a rule without ports."""
    docs = load_all(rendered)
    doc, pod = tickd_workload(docs)
    labels = doc["spec"]["template"].get("metadata", {}).get("labels", {})
    tickd = next(c for c in pod.get("initContainers", []) + pod.get("containers", [])
                 if c.get("name") == "tickd")
    for arg in tickd.get("args", []):
        emit("arg", arg)
    for policy in docs:
        if policy.get("kind") != "NetworkPolicy":
            continue
        name = policy["metadata"]["name"]
        spec = policy.get("spec", {})
        if not selects(spec.get("podSelector", {}), labels):
            emit("policy", name, "other")
            continue
        emit("policy", name, "tickd", *spec.get("policyTypes", []))
        for direction, peers_key in (("ingress", "from"), ("egress", "to")):
            for rule in spec.get(direction, []):
                peers = len(rule.get(peers_key, []))
                for port in rule.get("ports", [{"port": "*"}]):
                    emit(direction, name, port.get("port", "*"), port.get("protocol", "TCP"), peers)


def secret(path, name, key):
    for doc in load_all(path):
        if doc.get("kind") == "Secret" and doc["metadata"]["name"] == name:
            if key in doc.get("stringData", {}):
                sys.stdout.write(doc["stringData"][key])
            elif key in doc.get("data", {}):
                sys.stdout.write(base64.b64decode(doc["data"][key]).decode())
            else:
                fail(f"Secret {name} has no key {key}")
            return
    fail(f"{path} has no Secret {name}")


def main(argv):
    if len(argv) == 4 and argv[1] == "render":
        render(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "same":
        same(argv[2], argv[3])
    elif len(argv) == 3 and argv[1] == "facts":
        facts(argv[2])
    elif len(argv) == 3 and argv[1] == "policies":
        policies(argv[2])
    elif len(argv) == 5 and argv[1] == "secret":
        secret(argv[2], argv[3], argv[4])
    else:
        fail(__doc__)


if __name__ == "__main__":
    main(sys.argv)
