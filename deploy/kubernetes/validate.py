"""Validates rendered tts-rt manifests offline: python validate.py FILE...

Three layers, each naming the object and field it refuses:

1. The Kubernetes OpenAPI schemas bundled by `kubernetes-validate` (PyPI,
   pinned in requirements.txt), strict (unknown fields refused), for every
   built-in kind, at each version in KUBERNETES_VERSIONS.
2. The two custom resources, whose schemas live with their operators'
   CRDs in the cluster, not in that package: ServiceMonitor
   (monitoring.coreos.com/v1) and ScaledObject (keda.sh/v1alpha1) are
   checked against the subset schemas below, written from the operators'
   API references for the fields these manifests use, strict as well. A
   cluster with the operators installed checks the rest:
   `kubectl apply --dry-run=server -k ...`.
3. What the API server checks in code and no schema says (quantities,
   port ranges, counts that cannot be negative, enums), and what these
   manifests promise (requests == limits, probes on /ready and /health,
   a grace period that covers the preStop sleep and serve's drain, the
   HPA on tts_load).

A kind with no schema at all is an error, so nothing passes unchecked.
Exit 0 when every object passes; 1 with one line per problem otherwise.
"""

from __future__ import annotations

import re
import sys
import tomllib

import jsonschema
import kubernetes_validate
import yaml

KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")

# --- 2. the custom resources' subset schemas ----------------------------------

_STR = {"type": "string"}
_INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": _STR},
        "matchExpressions": {"type": "array", "items": {"type": "object"}},
    },
}
_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
_META = {"type": "object", "required": ["name"], "properties": {"name": _STR, "namespace": _STR}}
_SCALING_RULES = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "stabilizationWindowSeconds": {"type": "integer", "minimum": 0, "maximum": 3600},
        "selectPolicy": {"enum": ["Max", "Min", "Disabled"]},
        "policies": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["type", "value", "periodSeconds"],
                "properties": {
                    "type": {"enum": ["Pods", "Percent"]},
                    "value": {"type": "integer", "minimum": 1},
                    "periodSeconds": {"type": "integer", "minimum": 1, "maximum": 1800},
                },
            },
        },
    },
}

CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["selector", "endpoints"],
                "additionalProperties": False,
                "properties": {
                    "selector": _LABEL_SELECTOR,
                    "jobLabel": _STR,
                    "namespaceSelector": {"type": "object"},
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "port": _STR,
                                "targetPort": {"type": ["integer", "string"]},
                                "path": {"type": "string", "pattern": "^/"},
                                "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                                "interval": _DURATION,
                                "scrapeTimeout": _DURATION,
                                "honorLabels": {"type": "boolean"},
                                "authorization": {"type": "object"},
                                "relabelings": {"type": "array"},
                                "metricRelabelings": {"type": "array"},
                            },
                        },
                    },
                },
            },
        },
    },
    ("keda.sh/v1alpha1", "ScaledObject"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["scaleTargetRef", "triggers"],
                "additionalProperties": False,
                "properties": {
                    "scaleTargetRef": {
                        "type": "object",
                        "required": ["name"],
                        "additionalProperties": False,
                        "properties": {"apiVersion": _STR, "kind": _STR, "name": _STR, "envSourceContainerName": _STR},
                    },
                    "pollingInterval": {**_INT32, "minimum": 1},
                    "cooldownPeriod": {**_INT32, "minimum": 0},
                    "initialCooldownPeriod": {**_INT32, "minimum": 0},
                    "idleReplicaCount": {**_INT32, "minimum": 0},
                    "minReplicaCount": {**_INT32, "minimum": 0},
                    "maxReplicaCount": {**_INT32, "minimum": 1},
                    "fallback": {"type": "object"},
                    "advanced": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "restoreToOriginalReplicaCount": {"type": "boolean"},
                            "horizontalPodAutoscalerConfig": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "name": _STR,
                                    "behavior": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "properties": {"scaleUp": _SCALING_RULES, "scaleDown": _SCALING_RULES},
                                    },
                                },
                            },
                        },
                    },
                    "triggers": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["type", "metadata"],
                            "additionalProperties": False,
                            "properties": {
                                "type": _STR,
                                "name": _STR,
                                "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                                "useCachedMetrics": {"type": "boolean"},
                                "metadata": {"type": "object", "additionalProperties": _STR},
                                "authenticationRef": {
                                    "type": "object",
                                    "required": ["name"],
                                    "properties": {"name": _STR, "kind": {"enum": ["TriggerAuthentication", "ClusterTriggerAuthentication"]}},
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}

# --- 3. what the API server checks in code, and this project's promises ------

QUANTITY = re.compile(r"^\+?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")
ENUMS = {
    "imagePullPolicy": {"Always", "IfNotPresent", "Never"},
    "restartPolicy": {"Always", "OnFailure", "Never"},
    "pathType": {"Exact", "Prefix", "ImplementationSpecific"},
    "protocol": {"TCP", "UDP", "SCTP"},
}
AT_LEAST = {  # field name -> smallest value the API server accepts
    "replicas": 0,
    "minReplicas": 1,
    "maxReplicas": 1,
    "terminationGracePeriodSeconds": 0,
    "periodSeconds": 1,
    "timeoutSeconds": 1,
    "failureThreshold": 1,
    "successThreshold": 1,
    "initialDelaySeconds": 0,
    "backoffLimit": 0,
    "revisionHistoryLimit": 0,
    "maxSkew": 1,
}
PORT_FIELDS = {"containerPort", "port", "targetPort"}


def quantity_value(q) -> float:
    """A Kubernetes quantity as a number (cores, bytes)."""
    if isinstance(q, (int, float)):
        return float(q)
    m = QUANTITY.match(q)
    mult = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "n": 1e-9, "u": 1e-6,
            "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
    suffix = m.group(3) or ""
    if suffix[:1] in ("e", "E"):
        return float(q)
    return float(m.group(1)) * mult.get(suffix, 1)


def walk(node, path, out):
    """Field-level checks over a whole object: quantities, ports, counts, enums."""
    if isinstance(node, dict):
        for k, v in node.items():
            p = f"{path}.{k}" if path else k
            if k in ("requests", "limits") and isinstance(v, dict):
                for res, q in v.items():
                    if not (isinstance(q, (int, float)) and q >= 0) and not (isinstance(q, str) and QUANTITY.match(q)):
                        out.append(f"{p}.{res}: {q!r} is not a Kubernetes quantity (e.g. 2, 500m, 3Gi)")
            elif k in ("sizeLimit", "storage") and not (isinstance(v, str) and QUANTITY.match(v)):
                out.append(f"{p}: {v!r} is not a Kubernetes quantity")
            elif k in PORT_FIELDS and isinstance(v, int) and not 1 <= v <= 65535:
                out.append(f"{p}: port {v} is outside 1..65535")
            elif k in AT_LEAST and isinstance(v, int) and not isinstance(v, bool) and v < AT_LEAST[k]:
                out.append(f"{p}: {v} is below {AT_LEAST[k]}")
            elif k in ENUMS and isinstance(v, str) and v not in ENUMS[k]:
                out.append(f"{p}: {v!r} is not one of {sorted(ENUMS[k])}")
            walk(v, p, out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            walk(v, f"{path}.{i}", out)


def serve_settings(docs) -> dict:
    for d in docs:
        if d.get("kind") == "ConfigMap" and "serve.toml" in (d.get("data") or {}):
            return tomllib.loads(d["data"]["serve.toml"])
    return {}


def promises(d, settings) -> list[str]:
    """What the tts-rt manifests promise (docs/deploy.md)."""
    out = []
    kind = d.get("kind")
    if kind == "Deployment" and d["metadata"]["name"] == "tts-rt":
        pod = d["spec"]["template"]["spec"]
        c = next((c for c in pod["containers"] if c["name"] == "tts-rt"), None)
        if c is None:
            return ["no container named tts-rt"]
        res = c.get("resources", {})
        for r in ("cpu", "memory"):
            req, lim = res.get("requests", {}).get(r), res.get("limits", {}).get(r)
            if req is None or lim is None:
                out.append(f"resources.{r}: requests and limits must both be set (Guaranteed QoS)")
            elif QUANTITY.match(str(req)) and QUANTITY.match(str(lim)) and quantity_value(req) != quantity_value(lim):
                out.append(f"resources.{r}: requests {req} != limits {lim} (Guaranteed QoS needs them equal)")
        for probe, want in (("readinessProbe", "/ready"), ("livenessProbe", "/health")):
            path = (c.get(probe) or {}).get("httpGet", {}).get("path")
            if path != want:
                out.append(f"{probe}: GET {path} (expected {want})")
        cmd = ((c.get("lifecycle") or {}).get("preStop") or {}).get("exec", {}).get("command", [])
        pre = float(cmd[1]) if len(cmd) == 2 and cmd[0] == "sleep" else 0.0
        drain = float(settings.get("drain_timeout_s", 10.0))
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if isinstance(grace, int) and grace < pre + drain + 5:
            out.append(
                f"terminationGracePeriodSeconds {grace} < preStop {pre:g} s + drain_timeout_s {drain:g} s + 5 s: "
                "the kubelet would kill streams the drain promised to finish"
            )
    if kind == "HorizontalPodAutoscaler":
        names = [m.get("pods", {}).get("metric", {}).get("name") for m in d["spec"].get("metrics", [])]
        if "tts_load" not in names:
            out.append(f"metrics {names}: the HPA scales on tts_load")
    return out


def validate(docs) -> list[str]:
    problems = []
    settings = serve_settings(docs)
    for d in docs:
        kind, api = d.get("kind"), d.get("apiVersion")
        name = f"{kind}/{(d.get('metadata') or {}).get('name')}"
        found = []
        if (api, kind) in CRD_SCHEMAS:
            v = jsonschema.Draft202012Validator(CRD_SCHEMAS[(api, kind)])
            for e in sorted(v.iter_errors(d), key=lambda e: list(e.path)):
                found.append(f"{'.'.join(map(str, e.path)) or '(top)'}: {e.message}")
        else:
            for ver in KUBERNETES_VERSIONS:
                try:
                    kubernetes_validate.validate(d, ver, strict=True)
                except kubernetes_validate.SchemaNotFoundError:
                    found.append(f"{api} {kind}: no schema (not a Kubernetes {ver} kind, nor a known custom resource)")
                    break
                except kubernetes_validate.ValidationError as e:
                    found.append(f"Kubernetes {ver}: {'.'.join(map(str, e.path)) or '(top)'}: {e.message}")
        walked = []
        walk(d, "", walked)
        found += walked + promises(d, settings)
        problems += [f"{name}: {f}" for f in dict.fromkeys(found)]
    return problems


def main(files: list[str]) -> int:
    if not files:
        raise SystemExit(__doc__)
    failed = 0
    for f in files:
        with open(f) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d]
        problems = validate(docs)
        if problems:
            failed += 1
            for p in problems:
                print(f"{f}: {p}")
        else:
            print(f"{f}: {len(docs)} objects valid (Kubernetes {', '.join(KUBERNETES_VERSIONS)}, strict)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
