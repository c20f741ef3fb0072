#!/usr/bin/env python3
"""Offline checks of deploy/: the Kubernetes manifests and the Dockerfile, for a machine without Docker or a cluster.

    python3 deploy/check_manifests.py          (from anywhere; exits 1 on any error)

What it checks:
  * every YAML file under deploy/k8s parses (PyYAML: Debian's python3-yaml, which scripts/install-deps.sh installs);
  * each object against a schema of the fields its kind allows and requires, written from the API definitions
    cited in docs/deploy.md ("API versions and sources"): Kubernetes core/apps/policy/rbac v1 for the fields these
    manifests use, Gateway API Inference Extension v1.0 (InferencePool inference.networking.k8s.io/v1,
    InferenceObjective inference.networking.x-k8s.io/v1alpha2, the EPP's EndpointPickerConfig v1alpha1) and the
    Gateway API HTTPRoute v1. CRD objects are checked strictly (an unknown field is an error: the API server prunes
    or rejects it); core objects are checked strictly for the sub-objects listed here;
  * the two endpoint pickers: epp.yaml (the default, the GIE v1.0.1 reference EPP) and its variant epp-llm-d.yaml
    (llm-d's inference scheduler v0.8.0 with the precise prefix-cache scorer). Each is checked as part of the set
    it is deployed with: the kustomization's resources, and the same with epp.yaml swapped for the variant. The
    llm-d config's plugin parameters are checked strictly against the Go structs they decode into (cited at
    LLMD_PLUGIN_PARAMS): the EPP itself ignores unknown JSON fields, so a misspelt parameter would silently fall
    back to its default;
  * the objects against each other: selectors and labels, named ports, the InferencePool's target port and
    endpoint picker Service, the EPP's pool name and metric names (each must be a metric src/server exports), the
    drain timeline (terminationGracePeriodSeconds > preStop + --drain-timeout); for the precise prefix-cache
    scorer, that the replicas publish KV-cache events it can use (--kv-events bound on the port it dials, topic
    kv@<pod IP>:<target port>@<served model>, the same block size) and that its tokenizer gets the model's files;
  * the treespark container's flags against the options tools/cli declares, and against the image's ENTRYPOINT
    (a flag given twice is rejected by treespark);
  * the Dockerfile: every COPY source exists and is inside the build context that Dockerfile.dockerignore leaves,
    the exposed port, health check and model paths agree with the manifests.
It cannot check what only an API server, an admission webhook or a running EPP would (CEL rules beyond the two
reproduced here, defaulting, RBAC at run time, an image's real flags): docs/deploy.md lists what was not run.
"""
import fnmatch
import json
import os
import re
import shlex
import sys

try:
    import yaml
except ImportError:  # pragma: no cover
    print("check_manifests: PyYAML is not installed (Debian: python3-yaml); cannot parse the manifests", file=sys.stderr)
    sys.exit(2)

DEPLOY = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DEPLOY)
K8S = os.path.join(DEPLOY, "k8s")

errors = []
notes = []


def err(where, msg):
    errors.append(f"{where}: {msg}")


# ----------------------------------------------------------------------------------------------------------------
# A small structural schema language: dicts with
#   t: object | array | string | integer | boolean | map | intstr | quantity | any
#   req: required property names; p: properties; strict: unknown properties are errors (default True for object)
#   items, min, max, enum, pattern, minItems, maxItems, minLen, maxLen, values (schema of map values)
# ----------------------------------------------------------------------------------------------------------------
DNS1123_SUB = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
QUANTITY = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|Ki|Mi|Gi|Ti|Pi|Ei)?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
GROUP = r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
KIND = r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"
DURATION = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"  # Gateway API Duration (GEP-2257)


def S(t, **kw):
    kw["t"] = t
    return kw


STR = S("string")
INT = S("integer")
BOOL = S("boolean")
STRMAP = S("map", values=STR)
PORT = S("integer", min=1, max=65535)
LABELS = S("map", values=S("string", maxLen=63, pattern=LABEL_VALUE))

METADATA = S("object", req=["name"], strict=False, p={
    "name": S("string", minLen=1, maxLen=253, pattern=DNS1123_SUB),
    "namespace": S("string", pattern=DNS1123_LABEL),
    "labels": LABELS, "annotations": STRMAP})

LABEL_SELECTOR = S("object", p={"matchLabels": LABELS, "matchExpressions": S("array", items=S("any"))})

HTTP_GET = S("object", req=["port"], p={"path": STR, "port": S("intstr"), "host": STR, "scheme": S("string", enum=["HTTP", "HTTPS"]),
                                         "httpHeaders": S("array", items=S("object", req=["name", "value"], p={"name": STR, "value": STR}))})
EXEC = S("object", p={"command": S("array", items=STR)})
GRPC = S("object", req=["port"], p={"port": PORT, "service": STR})
TCP = S("object", req=["port"], p={"port": S("intstr"), "host": STR})
PROBE = S("object", one_of=["httpGet", "exec", "grpc", "tcpSocket"], p={
    "httpGet": HTTP_GET, "exec": EXEC, "grpc": GRPC, "tcpSocket": TCP,
    "initialDelaySeconds": S("integer", min=0), "periodSeconds": S("integer", min=1), "timeoutSeconds": S("integer", min=1),
    "successThreshold": S("integer", min=1), "failureThreshold": S("integer", min=1),
    "terminationGracePeriodSeconds": S("integer", min=1)})
LIFECYCLE_HANDLER = S("object", one_of=["exec", "httpGet", "tcpSocket", "sleep"], p={
    "exec": EXEC, "httpGet": HTTP_GET, "tcpSocket": TCP, "sleep": S("object", req=["seconds"], p={"seconds": S("integer", min=1)})})
ENV_VAR = S("object", req=["name"], p={"name": STR, "value": STR, "valueFrom": S("object", p={
    "fieldRef": S("object", req=["fieldPath"], p={"fieldPath": STR, "apiVersion": STR}),
    "resourceFieldRef": S("object", req=["resource"], p={"resource": S("string", enum=[
        "limits.cpu", "limits.memory", "limits.ephemeral-storage", "requests.cpu", "requests.memory", "requests.ephemeral-storage"]),
        "containerName": STR, "divisor": S("quantity")}),
    "configMapKeyRef": S("any"), "secretKeyRef": S("any")})})
RESOURCES = S("object", p={"requests": S("map", values=S("quantity")), "limits": S("map", values=S("quantity"))})
CONTAINER = S("object", req=["name", "image"], p={
    "name": S("string", pattern=DNS1123_LABEL), "image": S("string", minLen=1),
    "imagePullPolicy": S("string", enum=["Always", "IfNotPresent", "Never"]),
    "command": S("array", items=STR), "args": S("array", items=STR), "env": S("array", items=ENV_VAR),
    "ports": S("array", items=S("object", req=["containerPort"], p={
        "name": S("string", maxLen=15, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), "containerPort": PORT,
        "protocol": S("string", enum=["TCP", "UDP", "SCTP"])})),
    "startupProbe": PROBE, "readinessProbe": PROBE, "livenessProbe": PROBE,
    "lifecycle": S("object", p={"preStop": LIFECYCLE_HANDLER, "postStart": LIFECYCLE_HANDLER}),
    "resources": RESOURCES,
    "securityContext": S("object", p={"allowPrivilegeEscalation": BOOL, "readOnlyRootFilesystem": BOOL, "runAsNonRoot": BOOL,
                                      "runAsUser": INT, "runAsGroup": INT,
                                      "capabilities": S("object", p={"drop": S("array", items=STR), "add": S("array", items=STR)})}),
    "volumeMounts": S("array", items=S("object", req=["name", "mountPath"], p={"name": STR, "mountPath": STR, "readOnly": BOOL, "subPath": STR}))})
POD_SPEC = S("object", req=["containers"], p={
    "containers": S("array", items=CONTAINER, minItems=1), "initContainers": S("array", items=CONTAINER),
    "serviceAccountName": STR, "terminationGracePeriodSeconds": S("integer", min=0), "enableServiceLinks": BOOL,
    "securityContext": S("object", p={"runAsNonRoot": BOOL, "runAsUser": INT, "runAsGroup": INT, "fsGroup": INT,
                                      "seccompProfile": S("object", req=["type"], p={"type": S("string", enum=["RuntimeDefault", "Localhost", "Unconfined"]),
                                                                                      "localhostProfile": STR})}),
    "topologySpreadConstraints": S("array", items=S("object", req=["maxSkew", "topologyKey", "whenUnsatisfiable"], p={
        "maxSkew": S("integer", min=1), "topologyKey": STR, "whenUnsatisfiable": S("string", enum=["DoNotSchedule", "ScheduleAnyway"]),
        "labelSelector": LABEL_SELECTOR})),
    "volumes": S("array", items=S("object", req=["name"], one_of=["emptyDir", "configMap", "secret", "persistentVolumeClaim"], p={
        "name": S("string", pattern=DNS1123_LABEL), "emptyDir": S("object", p={"sizeLimit": S("quantity"), "medium": STR}),
        "configMap": S("object", req=["name"], p={"name": STR, "items": S("any"), "defaultMode": INT}),
        "secret": S("any"), "persistentVolumeClaim": S("any")})),
    "affinity": S("any"), "tolerations": S("any"), "nodeSelector": STRMAP})

SCHEMAS = {
    ("v1", "Namespace"): S("object", req=["metadata"], p={"metadata": METADATA}),
    ("v1", "ServiceAccount"): S("object", req=["metadata"], p={"metadata": METADATA}),
    ("v1", "ConfigMap"): S("object", req=["metadata"], p={"metadata": METADATA, "data": STRMAP}),
    ("v1", "Service"): S("object", req=["metadata", "spec"], p={"metadata": METADATA, "spec": S("object", req=["ports"], p={
        "type": S("string", enum=["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]), "selector": LABELS,
        "ports": S("array", minItems=1, items=S("object", req=["port"], p={
            "name": S("string", pattern=DNS1123_LABEL), "port": PORT, "targetPort": S("intstr"),
            "protocol": S("string", enum=["TCP", "UDP", "SCTP"]), "appProtocol": STR, "nodePort": PORT}))})}),
    ("apps/v1", "Deployment"): S("object", req=["metadata", "spec"], p={"metadata": METADATA, "spec": S("object", req=["selector", "template"], p={
        "replicas": S("integer", min=0), "revisionHistoryLimit": S("integer", min=0), "selector": LABEL_SELECTOR,
        "strategy": S("object", p={"type": S("string", enum=["RollingUpdate", "Recreate"]),
                                   "rollingUpdate": S("object", p={"maxSurge": S("intstr"), "maxUnavailable": S("intstr")})}),
        "template": S("object", req=["spec"], p={"metadata": S("object", strict=False, p={"labels": LABELS, "annotations": STRMAP}),
                                                 "spec": POD_SPEC})})}),
    ("policy/v1", "PodDisruptionBudget"): S("object", req=["metadata", "spec"], p={"metadata": METADATA, "spec": S("object", p={
        "minAvailable": S("intstr"), "maxUnavailable": S("intstr"), "selector": LABEL_SELECTOR})}),
    ("rbac.authorization.k8s.io/v1", "Role"): S("object", req=["metadata"], p={"metadata": METADATA, "rules": S("array", items=S("object", req=["verbs"], p={
        "apiGroups": S("array", items=STR), "resources": S("array", items=STR), "verbs": S("array", items=STR, minItems=1),
        "resourceNames": S("array", items=STR)}))}),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): S("object", req=["metadata", "roleRef"], p={"metadata": METADATA,
        "subjects": S("array", items=S("object", req=["kind", "name"], p={"kind": S("string", enum=["ServiceAccount", "User", "Group"]),
                                                                           "name": STR, "namespace": STR, "apiGroup": STR})),
        "roleRef": S("object", req=["apiGroup", "kind", "name"], p={"apiGroup": S("string", enum=["rbac.authorization.k8s.io"]),
                                                                     "kind": S("string", enum=["Role", "ClusterRole"]), "name": STR})}),
    # Gateway API Inference Extension v1.0: api/v1/inferencepool_types.go, shared_types.go (CRD
    # config/crd/bases/inference.networking.k8s.io_inferencepools.yaml). v1.0 allows exactly one target port and
    # requires endpointPickerRef; later releases allow up to 8 ports and make the reference optional, so these
    # rules hold for both. appProtocol came after v1.0 and is not allowed here.
    ("inference.networking.k8s.io/v1", "InferencePool"): S("object", req=["metadata", "spec"], p={"metadata": METADATA, "spec": S("object",
        req=["selector", "targetPorts", "endpointPickerRef"], p={
            "selector": S("object", req=["matchLabels"], p={"matchLabels": S("map", values=S("string", maxLen=63, pattern=LABEL_VALUE),
                                                                                minItems=1, maxItems=64)}),
            "targetPorts": S("array", minItems=1, maxItems=1, items=S("object", req=["number"], p={"number": PORT})),
            "endpointPickerRef": S("object", req=["name"], p={
                "group": S("string", maxLen=253, pattern=GROUP), "kind": S("string", minLen=1, maxLen=63, pattern=KIND),
                "name": S("string", minLen=1, maxLen=253), "port": S("object", req=["number"], p={"number": PORT}),
                "failureMode": S("string", enum=["FailOpen", "FailClose"])})})}),
    # config/crd/bases/inference.networking.x-k8s.io_inferenceobjectives.yaml (bundle v1.0.0).
    ("inference.networking.x-k8s.io/v1alpha2", "InferenceObjective"): S("object", req=["metadata", "spec"], p={"metadata": METADATA, "spec": S("object",
        req=["poolRef"], p={"priority": INT, "poolRef": S("object", req=["name"], p={
            "group": S("string", maxLen=253, pattern=GROUP), "kind": S("string", minLen=1, maxLen=63, pattern=KIND),
            "name": S("string", minLen=1, maxLen=253)})})}),
    # Gateway API v1 HTTPRoute (standard channel), the fields used here.
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): S("object", req=["metadata", "spec"], p={"metadata": METADATA, "spec": S("object", p={
        "parentRefs": S("array", maxItems=32, items=S("object", req=["name"], p={
            "group": S("string", pattern=GROUP), "kind": S("string", pattern=KIND), "namespace": S("string", pattern=DNS1123_LABEL),
            "name": S("string", minLen=1, maxLen=253), "sectionName": STR, "port": PORT})),
        "hostnames": S("array", items=STR),
        "rules": S("array", maxItems=16, items=S("object", p={
            "name": STR,
            "matches": S("array", maxItems=64, items=S("object", p={
                "path": S("object", p={"type": S("string", enum=["Exact", "PathPrefix", "RegularExpression"]),
                                       "value": S("string", maxLen=1024, pattern=r"^/")}),
                "headers": S("any"), "queryParams": S("any"), "method": STR})),
            "filters": S("any"),
            "backendRefs": S("array", maxItems=16, items=S("object", req=["name"], p={
                "group": S("string", pattern=GROUP), "kind": S("string", pattern=KIND), "name": S("string", minLen=1, maxLen=253),
                "namespace": S("string", pattern=DNS1123_LABEL), "port": PORT, "weight": S("integer", min=0, max=1000000)})),
            "timeouts": S("object", p={"request": S("string", pattern=DURATION), "backendRequest": S("string", pattern=DURATION)})}))})}),
}
SCHEMAS[("rbac.authorization.k8s.io/v1", "ClusterRole")] = SCHEMAS[("rbac.authorization.k8s.io/v1", "Role")]
SCHEMAS[("rbac.authorization.k8s.io/v1", "ClusterRoleBinding")] = SCHEMAS[("rbac.authorization.k8s.io/v1", "RoleBinding")]
CRD_KINDS = {"InferencePool", "InferenceObjective", "HTTPRoute"}

# The EPP's EndpointPickerConfig (inference.networking.x-k8s.io/v1alpha1) and the in-tree plugin types the v1.0
# EPP registers (cmd/epp/runner/runner.go, registerInTreePlugins).
EPP_CONFIG = S("object", req=["apiVersion", "kind", "plugins", "schedulingProfiles"], p={
    "apiVersion": S("string", enum=["inference.networking.x-k8s.io/v1alpha1"]), "kind": S("string", enum=["EndpointPickerConfig"]),
    "plugins": S("array", minItems=1, items=S("object", req=["type"], p={"type": STR, "name": STR, "parameters": S("any")})),
    "schedulingProfiles": S("array", minItems=1, items=S("object", req=["name", "plugins"], p={
        "name": STR, "plugins": S("array", minItems=1, items=S("object", req=["pluginRef"], p={"pluginRef": STR, "weight": S("integer", min=0)}))}))})
EPP_PLUGIN_TYPES = {"prefix-cache-scorer", "max-score-picker", "random-picker", "weighted-random-picker", "single-profile-handler",
                    "kv-cache-utilization-scorer", "queue-scorer", "lora-affinity-scorer"}
# Scorers that need what treespark does not have: LoRA adapters.
EPP_PLUGINS_NOT_FOR_TREESPARK = {"lora-affinity-scorer": "treespark serves no LoRA adapters"}

# llm-d's inference scheduler v0.8.0 (ghcr.io/llm-d/llm-d-inference-scheduler): the same config file with a data
# layer section (llm-d/llm-d guides/precise-prefix-cache-aware/scheduler/features/pod-discovery.values.yaml), its
# successor group llm-d.ai/v1alpha1 (llm-d-inference-scheduler RELEASE-NOTES.md, PR #972), and float weights.
LLMD_EPP_CONFIG = S("object", req=["apiVersion", "kind", "plugins", "schedulingProfiles"], p={
    "apiVersion": S("string", enum=["inference.networking.x-k8s.io/v1alpha1", "llm-d.ai/v1alpha1"]),
    "kind": S("string", enum=["EndpointPickerConfig"]),
    "plugins": S("array", minItems=1, items=S("object", req=["type"], p={"type": STR, "name": STR, "parameters": S("any")})),
    "schedulingProfiles": S("array", minItems=1, items=S("object", req=["name", "plugins"], p={
        "name": STR, "plugins": S("array", minItems=1, items=S("object", req=["pluginRef"], p={"pluginRef": STR, "weight": S("number", min=0)}))})),
    "dataLayer": S("object", p={"sources": S("array", items=S("object", req=["pluginRef"], p={
        "pluginRef": STR, "extractors": S("array", items=S("object", req=["pluginRef"], p={"pluginRef": STR}))}))}),
    "featureGates": S("any"), "saturationDetector": S("any")})
UDS_TOKENIZER = S("object", p={"socketFile": S("string", minLen=1), "timeout": STR, "maxRetries": S("integer", min=0)})
# Plugin parameters, from the Go structs they are decoded into (json tags):
#   tokenizer                    llm-d-inference-scheduler pkg/epp/framework/plugins/requestcontrol/dataproducer/
#                                tokenizer/tokenizer.go (tokenizerPluginConfig) and llm-d-kv-cache
#                                tokenization.UdsTokenizerConfig (socketFile, timeout, maxRetries; the plugin's README)
#   precise-prefix-cache-scorer  llm-d-inference-scheduler .../scheduling/scorer/preciseprefixcache/
#                                precise_prefix_cache.go (PluginConfig) with llm-d-kv-cache
#                                pkg/kvcache/kvblock/token_processor.go (TokenProcessorConfig),
#                                pkg/kvcache/indexer.go (Config), pkg/kvcache/kvblock/index.go (IndexConfig),
#                                pkg/kvcache/backend.go (KVCacheBackendConfig), pkg/kvevents/pool.go (Config,
#                                PodDiscoveryConfig), docs/configuration.md (tokenizersPoolConfig)
#   core-metrics-extractor       gateway-api-inference-extension pkg/epp/framework/plugins/datalayer metrics
#                                extractor (modelServerExtractorParams, engineConfigParams)
#   metrics-data-source          the scheme / path / insecureSkipVerify parameters llm-d's configs set
LLMD_PLUGIN_PARAMS = {
    "tokenizer": S("object", req=["modelName"], p={"modelName": S("string", minLen=1), "udsTokenizerConfig": UDS_TOKENIZER}),
    "precise-prefix-cache-scorer": S("object", p={
        "tokenProcessorConfig": S("object", p={"blockSize": S("integer", min=1), "hashSeed": STR}),
        "indexerConfig": S("object", p={
            "kvBlockIndexConfig": S("object", p={
                "inMemoryConfig": S("object", p={"size": S("integer", min=1), "podCacheSize": S("integer", min=1)}),
                "costAwareMemoryConfig": S("object", p={"size": STR}), "redisConfig": S("any"), "valkeyConfig": S("any"),
                "enableMetrics": BOOL, "metricsLoggingInterval": S("any")}),
            "tokenizersPoolConfig": S("object", req=["modelName"], p={
                "modelName": S("string", minLen=1), "workersCount": S("integer", min=1), "minPrefixOverlapRatio": S("number", min=0),
                "hf": S("any"), "local": S("any"), "uds": UDS_TOKENIZER}),
            "kvCacheBackendConfigs": S("array", items=S("object", req=["name", "weight"], p={
                "name": S("string", minLen=1), "weight": S("number", min=0), "modelConfigs": S("any")})),
            "prefixStoreConfig": S("any")}),
        "kvEventsConfig": S("object", p={
            "zmqEndpoint": STR, "topicFilter": STR, "concurrency": S("integer", min=1),
            "engineType": S("string", enum=["vllm", "sglang"]), "discoverPods": BOOL,
            "podDiscoveryConfig": S("object", p={"podLabelSelector": STR, "podNamespace": STR, "socketPort": PORT})}),
        "speculativeIndexing": BOOL, "speculativeTTL": S("any")}),
    "core-metrics-extractor": S("object", p={
        "engineLabelKey": STR, "defaultEngine": STR,
        "engineConfigs": S("array", items=S("object", req=["name"], p={
            "name": S("string", minLen=1), "queuedRequestsSpec": STR, "runningRequestsSpec": STR, "kvUsageSpec": STR,
            "loraSpec": STR, "cacheInfoSpec": STR}))}),
    "metrics-data-source": S("object", p={"scheme": S("string", enum=["http", "https"]), "path": S("string", pattern=r"^/"),
                                          "insecureSkipVerify": BOOL}),
    # No parameters.
    "endpoint-notification-source": S("object", p={}), "single-profile-handler": S("object", p={}),
    "queue-scorer": S("object", p={}), "kv-cache-utilization-scorer": S("object", p={}), "max-score-picker": S("object", p={}),
    "decode-filter": S("object", p={}),
}
# Types the v0.8.0 scheduler registers that these checks know (the GIE in-tree ones, which it keeps, and those of
# llm-d's configs cited above). Add one here, with its parameters above, before using it.
LLMD_PLUGIN_TYPES = EPP_PLUGIN_TYPES | set(LLMD_PLUGIN_PARAMS)
# Defaults that apply when the config leaves a field out: llm-d-kv-cache token_processor.go (defaultBlockSize 16),
# pkg/kvevents/pool.go (DefaultConfig: topicFilter "kv@", discoverPods true; DefaultPodReconcilerConfig: socketPort
# 5557), and the metrics extractor's built-in "vllm" engine (defaultEngineConfigs, which scrapes
# vllm:lora_requests_info).
LLMD_DEFAULTS = {"blockSize": 16, "topicFilter": "kv@", "discoverPods": True, "socketPort": 5557, "defaultEngine": "vllm",
                 "builtinEngines": {"vllm": {"queuedRequestsSpec": "vllm:num_requests_waiting",
                                             "runningRequestsSpec": "vllm:num_requests_running",
                                             "kvUsageSpec": "vllm:kv_cache_usage_perc", "loraSpec": "vllm:lora_requests_info",
                                             "cacheInfoSpec": "vllm:cache_config_info"}}}
EPP_FLAVORS = {"registry.k8s.io/gateway-api-inference-extension/epp": "gie", "ghcr.io/llm-d/llm-d-inference-scheduler": "llm-d"}
# The EPP files: epp.yaml is listed in kustomization.yaml; a variant is applied instead of the file it names.
EPP_VARIANTS = {"epp-llm-d.yaml": "epp.yaml"}


def validate(node, schema, path, crd, top=False):
    t = schema["t"]
    if t == "any":
        return
    if t == "object":
        if not isinstance(node, dict):
            return err(path, f"expected an object, got {type(node).__name__}")
        for r in schema.get("req", []):
            if r not in node:
                err(path, f"missing required field '{r}'")
        props = schema.get("p", {})
        if schema.get("strict", True):
            for k in node:
                if k not in props and not (top and k in ("apiVersion", "kind")):
                    err(f"{path}.{k}", "unknown field" + (" (a structural CRD schema prunes or rejects it)" if crd else
                                                          " (not in the checker's schema for this kind)"))
        if "one_of" in schema:
            present = [k for k in schema["one_of"] if k in node]
            if len(present) != 1:
                err(path, f"exactly one of {schema['one_of']} expected, got {present}")
        for k, v in node.items():
            if k in props:
                validate(v, props[k], f"{path}.{k}", crd)
        return
    if t == "map":
        if not isinstance(node, dict):
            return err(path, "expected a map")
        if "minItems" in schema and len(node) < schema["minItems"]:
            err(path, f"at least {schema['minItems']} entries expected")
        if "maxItems" in schema and len(node) > schema["maxItems"]:
            err(path, f"at most {schema['maxItems']} entries allowed")
        for k, v in node.items():
            validate(v, schema["values"], f"{path}[{k}]", crd)
        return
    if t == "array":
        if not isinstance(node, list):
            return err(path, "expected a list")
        if len(node) < schema.get("minItems", 0):
            err(path, f"at least {schema['minItems']} items expected")
        if "maxItems" in schema and len(node) > schema["maxItems"]:
            err(path, f"at most {schema['maxItems']} items allowed")
        for i, v in enumerate(node):
            validate(v, schema["items"], f"{path}[{i}]", crd)
        return
    if t == "string":
        if not isinstance(node, str):
            return err(path, f"expected a string, got {type(node).__name__} {node!r} (quote it)")
        if "enum" in schema and node not in schema["enum"]:
            err(path, f"{node!r} not one of {schema['enum']}")
        if len(node) < schema.get("minLen", 0) or len(node) > schema.get("maxLen", 1 << 30):
            err(path, f"length {len(node)} outside [{schema.get('minLen', 0)}, {schema.get('maxLen', '-')}]")
        if "pattern" in schema and not re.search(schema["pattern"], node):
            err(path, f"{node!r} does not match {schema['pattern']}")
        return
    if t == "number":
        if isinstance(node, bool) or not isinstance(node, (int, float)):
            return err(path, f"expected a number, got {node!r}")
        if node < schema.get("min", -(1 << 62)) or node > schema.get("max", 1 << 62):
            err(path, f"{node} outside [{schema.get('min')}, {schema.get('max')}]")
        return
    if t == "integer":
        if isinstance(node, bool) or not isinstance(node, int):
            return err(path, f"expected an integer, got {node!r}")
        if node < schema.get("min", -(1 << 62)) or node > schema.get("max", 1 << 62):
            err(path, f"{node} outside [{schema.get('min')}, {schema.get('max')}]")
        return
    if t == "boolean":
        if not isinstance(node, bool):
            err(path, f"expected true/false, got {node!r}")
        return
    if t == "intstr":
        if isinstance(node, bool) or not isinstance(node, (int, str)):
            err(path, f"expected an integer or a string, got {node!r}")
        return
    if t == "quantity":
        if isinstance(node, bool) or not isinstance(node, (int, float, str)) or not re.match(QUANTITY, str(node)):
            err(path, f"not a resource quantity: {node!r}")
        return
    raise AssertionError(t)


def load_objects():
    objs = []
    for name in sorted(os.listdir(K8S)):
        if not name.endswith((".yaml", ".yml")):
            continue
        full = os.path.join(K8S, name)
        try:
            with open(full) as f:
                docs = list(yaml.safe_load_all(f))
        except yaml.YAMLError as e:
            err(f"k8s/{name}", f"YAML does not parse: {e}")
            continue
        for i, d in enumerate(docs):
            if d is None:
                continue
            if not isinstance(d, dict):
                err(f"k8s/{name}[{i}]", "a document is not a mapping")
                continue
            objs.append((name, d))
    return objs


def parse_duration_s(text):
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[u] for n, u in re.findall(r"([0-9]+)(ms|h|m|s)", text))


def serve_flags():
    """Long options the treespark binary declares (tools/cli: add_option / add_flag and the shared helpers)."""
    flags = set()
    cli = os.path.join(ROOT, "tools", "cli")
    for name in os.listdir(cli):
        if name.endswith((".cc", ".h")):
            with open(os.path.join(cli, name)) as f:
                flags |= set(re.findall(r'add_(?:option|flag)\(\s*"(--[a-z0-9-]+)', f.read()))
    return flags


def exported_metrics():
    text = ""
    srv = os.path.join(ROOT, "src", "server")
    for name in os.listdir(srv):
        if name.endswith((".cc", ".h")):
            with open(os.path.join(srv, name)) as f:
                text += f.read()
    return text


def flag_values(args):
    """{flag: value or None} of a treespark argument list; duplicates reported by the caller."""
    out, seen_twice, i = {}, [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            key, val = (a.split("=", 1) + [None])[:2] if "=" in a else (a, None)
            if val is None and i + 1 < len(args) and not args[i + 1].startswith("--"):
                val = args[i + 1]
                i += 1
            if key in out:
                seen_twice.append(key)
            out[key] = val
        i += 1
    return out, seen_twice


# ----------------------------------------------------------------------------------------------------------------
# Dockerfile
# ----------------------------------------------------------------------------------------------------------------
def dockerignore_excluded(rel, patterns):
    """moby/patternmatcher semantics for the patterns used here: the last pattern matching the path or one of its
    parent directories decides; '!' re-includes."""
    parts = rel.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for pat in patterns:
        neg = pat.startswith("!")
        p = pat[1:] if neg else pat
        p = p.rstrip("/")
        for c in candidates:
            if c.count("/") == p.count("/") and fnmatch.fnmatchcase(c, p):
                excluded = not neg
                break
    return excluded


def check_dockerfile():
    path = os.path.join(DEPLOY, "Dockerfile")
    with open(path) as f:
        raw = f.read()
    lines, cur = [], ""
    for line in raw.splitlines():
        if not cur and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip():
            lines.append(cur.strip())
        cur = ""
    ign_path = os.path.join(DEPLOY, "Dockerfile.dockerignore")
    with open(ign_path) as f:
        patterns = [l.strip() for l in f if l.strip() and not l.strip().startswith("#")]
    info = {"copied_to": [], "copies": [], "stages": []}
    for line in lines:
        instr, _, rest = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            info["stages"].append(rest)
        elif instr == "COPY":
            toks = shlex.split(rest)
            opts = [t for t in toks if t.startswith("--")]
            toks = [t for t in toks if not t.startswith("--")]
            srcs, dest = toks[:-1], toks[-1]
            info["copied_to"].append(dest)
            if any(o.startswith("--from") for o in opts):
                continue
            info["copies"].append((srcs, dest))
            for s in srcs:
                rel = s.rstrip("/")
                if not os.path.exists(os.path.join(ROOT, rel)):
                    err("deploy/Dockerfile", f"COPY source '{s}' does not exist in the repository")
                elif dockerignore_excluded(rel, patterns):
                    err("deploy/Dockerfile", f"COPY source '{s}' is excluded by Dockerfile.dockerignore")
        elif instr in ("ENTRYPOINT", "CMD"):
            try:
                info[instr] = json.loads(rest)
            except json.JSONDecodeError:
                err("deploy/Dockerfile", f"{instr} is not in exec (JSON array) form: signals would go to a shell")
        elif instr == "EXPOSE":
            info["expose"] = [int(p.split("/")[0]) for p in rest.split()]
        elif instr == "HEALTHCHECK":
            info["healthcheck"] = rest
        elif instr == "USER":
            info["user"] = rest
    if not info["stages"] or not all("bookworm" in s or "${DEBIAN_RELEASE}" in s for s in info["stages"]):
        err("deploy/Dockerfile", f"stages must be Debian 12 (bookworm): {info['stages']}")
    if "ARG DEBIAN_RELEASE=bookworm" not in raw:
        err("deploy/Dockerfile", "ARG DEBIAN_RELEASE=bookworm expected")
    if "scripts/install-deps.sh" not in raw:
        err("deploy/Dockerfile", "the build stage must install its dependencies with scripts/install-deps.sh")
    if "--preset release" not in raw:
        err("deploy/Dockerfile", "the build stage must build the release preset")
    user = info.get("user", "root").split(":")[0]
    if user in ("", "0", "root"):
        err("deploy/Dockerfile", "the runtime stage must run as a non-root user")
    ep, cmd = info.get("ENTRYPOINT", []), info.get("CMD", [])
    if ep[:1] != ["/usr/local/bin/treespark"] or "serve" not in ep:
        err("deploy/Dockerfile", f"ENTRYPOINT must run treespark serve: {ep}")
    ep_flags, twice = flag_values(ep[2:])
    cmd_flags, twice2 = flag_values(cmd)
    for f in twice + twice2 + sorted(set(ep_flags) & set(cmd_flags)):
        err("deploy/Dockerfile", f"{f} given twice in ENTRYPOINT + CMD (treespark rejects it)")
    known = serve_flags()
    for f in list(ep_flags) + list(cmd_flags):
        if f not in known:
            err("deploy/Dockerfile", f"{f} is not a treespark option (tools/cli)")
    if ep_flags.get("--host") != "0.0.0.0":
        err("deploy/Dockerfile", "ENTRYPOINT must listen on --host 0.0.0.0")
    port = int(ep_flags.get("--port") or 8080)
    if port not in info.get("expose", []):
        err("deploy/Dockerfile", f"EXPOSE {info.get('expose')} does not include --port {port}")
    hc = info.get("healthcheck", "")
    if "treespark-healthcheck" not in hc or "/usr/local/bin/treespark-healthcheck" not in info["copied_to"]:
        err("deploy/Dockerfile", "HEALTHCHECK must run the copied /usr/local/bin/treespark-healthcheck")
    with open(os.path.join(DEPLOY, "healthcheck.sh")) as f:
        hs = f.read()
    if "/health" not in hs or f"TREESPARK_HEALTH_PORT:-{port}" not in hs:
        err("deploy/healthcheck.sh", f"must probe /health on port {port}")
    for m in (cmd_flags.get("--model"), cmd_flags.get("--drafter")):
        if not m or not any(m.rstrip("/") == d.rstrip("/") for d in info["copied_to"]):
            err("deploy/Dockerfile", f"CMD model path {m} is not a COPY destination")
    info["ep_flags"], info["port"] = ep_flags, port
    return info


# ----------------------------------------------------------------------------------------------------------------
# Cross-object checks
# ----------------------------------------------------------------------------------------------------------------
def first(objs, kind, name=None):
    for f, o in objs:
        if o.get("kind") == kind and (name is None or o.get("metadata", {}).get("name") == name):
            return f, o
    return None, None


def engine_default(field, fallback):
    """A default of EngineConfig (src/engine/engine.h), e.g. prefix_block_tokens."""
    with open(os.path.join(ROOT, "src", "engine", "engine.h")) as f:
        m = re.search(rf"\b{field}\s*=\s*(\d+)\s*;", f.read())
    return int(m.group(1)) if m else fallback


def kv_event_medium():
    """The `medium` treespark's KV-cache events carry (src/server/kv_events.cc)."""
    with open(os.path.join(ROOT, "src", "server", "kv_events.cc")) as f:
        m = re.search(r'kMedium\s*=\s*"([^"]*)"', f.read())
    return m.group(1) if m else None


def env_field(container, name):
    """The downward-API fieldPath of env var `name` of a container (None if not a fieldRef)."""
    for e in container.get("env", []):
        if e["name"] == name:
            return e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    return None


def check_model_servers(objs, docker):
    """The treespark Deployment, its Service and PodDisruptionBudget: the same whichever EPP is deployed. Returns
    what the per-EPP checks need, or None."""
    known_flags = serve_flags()
    _, dep = first(objs, "Deployment", "treespark")
    _, svc = first(objs, "Service", "treespark")
    if dep is None:
        return err("k8s", "no Deployment 'treespark'")
    tmpl = dep["spec"]["template"]
    pod_labels = tmpl.get("metadata", {}).get("labels", {})
    sel = dep["spec"]["selector"].get("matchLabels", {})
    if any(pod_labels.get(k) != v for k, v in sel.items()):
        err("Deployment/treespark", "spec.selector.matchLabels do not match the pod template's labels")
    pod = tmpl["spec"]
    c = next((c for c in pod["containers"] if c["name"] == "treespark"), None)
    if c is None:
        return err("Deployment/treespark", "no container 'treespark'")
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    if docker and docker["port"] not in ports.values():
        err("Deployment/treespark", f"no containerPort {docker['port']} (the image's --port)")
    if c.get("command"):
        err("Deployment/treespark", "do not set command: it replaces the image's ENTRYPOINT (serve --host --port)")
    args = c.get("args", [])
    flags, twice = flag_values(args)
    for f in twice:
        err("Deployment/treespark", f"{f} given twice")
    for f in flags:
        if f not in known_flags:
            err("Deployment/treespark", f"{f} is not a treespark option (tools/cli)")
        if docker and f in docker["ep_flags"]:
            err("Deployment/treespark", f"{f} is already in the image's ENTRYPOINT (treespark rejects a repeated flag)")
    env_names = {e["name"] for e in c.get("env", [])}
    for a in args:
        for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
            if ref not in env_names:
                err("Deployment/treespark", f"args refer to $({ref}) but no env var defines it")
    if "--threads" not in flags:
        err("Deployment/treespark", "pass --threads (treespark otherwise sizes its pool from the node's CPUs, not the CPU limit)")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = c.get(probe)
        if not p or p.get("httpGet", {}).get("path") != "/health":
            err("Deployment/treespark", f"{probe} must GET /health")
            continue
        port = p["httpGet"]["port"]
        if isinstance(port, str) and port not in ports:
            err("Deployment/treespark", f"{probe} names port '{port}' that the container does not declare")
    res = c.get("resources", {})
    for kind in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if r not in res.get(kind, {}):
                err("Deployment/treespark", f"resources.{kind}.{r} missing")
    mounts = {m["name"] for m in c.get("volumeMounts", [])}
    vols = {v["name"] for v in pod.get("volumes", [])}
    for m in mounts - vols:
        err("Deployment/treespark", f"volumeMount '{m}' has no volume")
    # Drain timeline: the grace period counts from preStop; treespark needs about a second after --drain-timeout.
    drain = float(flags.get("--drain-timeout") or 30)
    pre = 0
    ps = c.get("lifecycle", {}).get("preStop", {})
    if "sleep" in ps:
        pre = ps["sleep"]["seconds"]
    elif ps.get("exec", {}).get("command", [None])[0] == "sleep":
        pre = float(ps["exec"]["command"][1])
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if grace < pre + drain + 5:
        err("Deployment/treespark", f"terminationGracePeriodSeconds {grace} < preStop {pre:g} s + --drain-timeout {drain:g} s + 5 s margin")
    notes.append(f"drain timeline: preStop {pre:g} s + --drain-timeout {drain:g} s + margin {grace - pre - drain:g} s = grace {grace} s")
    # Prefix cache and KV-cache events (tools/cli/cmd_serve.cc; docs/serving.md, "Prefix cache and KV-cache events").
    model = flags.get("--model") or (docker or {}).get("cmd_flags", {}).get("--model") or ""
    served = flags.get("--served-model-name") or os.path.basename(model.rstrip("/"))
    prefix_cache = "--no-prefix-cache" not in flags
    block = int(flags.get("--prefix-block-tokens") or engine_default("prefix_block_tokens", 16))
    kv = None
    if "--kv-events-topic" in flags and "--kv-events" not in flags:
        err("Deployment/treespark", "--kv-events-topic needs --kv-events (treespark refuses it alone)")
    if "--kv-events" in flags:
        endpoint = flags["--kv-events"] or ""
        m = re.match(r"^tcp://(\*|0\.0\.0\.0|\[::\]):([0-9]+)$", endpoint)
        kport = int(m.group(2)) if m else None
        if m is None:
            err("Deployment/treespark", f"--kv-events {endpoint!r}: bind every interface on a fixed TCP port (tcp://*:PORT), "
                "so that a scheduler in another pod can connect to the publisher")
        elif kport not in ports.values():
            err("Deployment/treespark", f"--kv-events binds port {kport}, which is not a containerPort of the treespark container")
        elif docker and kport == docker["port"]:
            err("Deployment/treespark", f"--kv-events port {kport} is the HTTP port")
        if not prefix_cache:
            err("Deployment/treespark", "--kv-events with --no-prefix-cache: without the prefix cache there are no blocks to report")
        topic = flags.get("--kv-events-topic") or ""
        kv = {"port": kport, "topic": topic, "pod": None, "model": None}
        parts = topic.split("@")
        if len(parts) == 3 and parts[0] == "kv":
            kv["pod"], kv["model"] = parts[1], parts[2]
            if parts[2] != served:
                err("Deployment/treespark", f"--kv-events-topic model {parts[2]!r} is not the served model name {served!r}: llm-d "
                    "indexes the events under the topic's model and looks requests up by their \"model\"")
        elif topic:
            err("Deployment/treespark", f"--kv-events-topic {topic!r}: llm-d reads kv@<pod>@<model> (three parts split at '@'); "
                "anything else becomes the pod id, with no model")
        notes.append(f"treespark: prefix cache on, {block}-token blocks; KV events on {endpoint}, topic {topic!r}")
    else:
        notes.append(f"treespark: prefix cache {'on, ' + str(block) + '-token blocks' if prefix_cache else 'off'}; no KV events")
    # Service
    if svc is not None:
        if any(pod_labels.get(k) != v for k, v in svc["spec"].get("selector", {}).items()):
            err("Service/treespark", "selector does not match the Deployment's pod labels")
        for p in svc["spec"]["ports"]:
            tp = p.get("targetPort", p["port"])
            if (isinstance(tp, str) and tp not in ports) or (isinstance(tp, int) and tp not in ports.values()):
                err("Service/treespark", f"targetPort {tp!r} is not a container port")
    _, pdb = first(objs, "PodDisruptionBudget")
    if pdb is not None:
        s = pdb["spec"]
        if ("minAvailable" in s) == ("maxUnavailable" in s):
            err("PodDisruptionBudget", "set exactly one of minAvailable and maxUnavailable")
        if any(pod_labels.get(k) != v for k, v in s.get("selector", {}).get("matchLabels", {}).items()):
            err("PodDisruptionBudget", "selector does not match the Deployment's pod labels")
    return {"dep": dep, "pod_labels": pod_labels, "container": c, "ports": ports, "flags": flags, "drain": drain,
            "grace": grace, "model": model, "served": served, "prefix_cache": prefix_cache, "block": block, "kv": kv}


def check_set(label, objs, ms, docker):
    """One deployable set: the model servers (ms, from check_model_servers), the InferencePool and its route, and
    the endpoint picker of that set."""
    metrics_src = exported_metrics()
    _, pool = first(objs, "InferencePool")
    pod_labels, ports, drain, grace = ms["pod_labels"], ms["ports"], ms["drain"], ms["grace"]
    if pool is None:
        return err("k8s", "no InferencePool")
    pname = pool["metadata"]["name"]
    ps_ = pool["spec"]
    if any(pod_labels.get(k) != v for k, v in ps_["selector"]["matchLabels"].items()):
        err(f"InferencePool/{pname}", "selector.matchLabels do not select the treespark pods")
    tport = ps_["targetPorts"][0]["number"]
    if tport not in ports.values():
        err(f"InferencePool/{pname}", f"targetPorts[0].number {tport} is not a treespark container port")
    ref = ps_["endpointPickerRef"]
    # CEL rule of the v1 CRD: "port is required when kind is 'Service' or unspecified".
    if ref.get("kind", "Service") == "Service" and "port" not in ref:
        err(f"InferencePool/{pname}", "endpointPickerRef.port is required when kind is Service (CRD CEL rule)")
    _, epp_svc = first(objs, "Service", ref["name"])
    svc_ports = {}
    if epp_svc is None:
        err(f"InferencePool/{pname}", f"endpointPickerRef names Service '{ref['name']}', which is not in deploy/k8s")
    else:
        svc_ports = {p["port"]: p for p in epp_svc["spec"]["ports"]}
        pnum = ref.get("port", {}).get("number", 9002)
        if pnum not in svc_ports:
            err(f"InferencePool/{pname}", f"endpointPickerRef port {pnum} is not a port of Service {ref['name']}")
        elif svc_ports[pnum].get("appProtocol") not in ("http2", "kubernetes.io/h2c"):
            err(f"Service/{ref['name']}", "the ext-proc port is gRPC: set appProtocol: http2")
    for f, o in objs:
        if o.get("kind") == "InferenceObjective":
            pr = o["spec"]["poolRef"]
            if pr["name"] != pname or pr.get("group", "inference.networking.k8s.io") != "inference.networking.k8s.io" \
                    or pr.get("kind", "InferencePool") != "InferencePool":
                err(f"InferenceObjective/{o['metadata']['name']}", f"poolRef does not name InferencePool {pname}")
        if o.get("kind") == "HTTPRoute":
            for rule in o["spec"].get("rules", []):
                for b in rule.get("backendRefs", []):
                    if b.get("kind", "Service") == "InferencePool":
                        if b.get("group") != "inference.networking.k8s.io" or b["name"] != pname:
                            err(f"HTTPRoute/{o['metadata']['name']}", f"backendRef must be group inference.networking.k8s.io, name {pname}")
                    elif b.get("kind", "Service") == "Service" and "port" not in b:
                        err(f"HTTPRoute/{o['metadata']['name']}", "a Service backendRef needs a port")
                to = rule.get("timeouts", {}).get("request")
                if to and parse_duration_s(to) < drain:
                    err(f"HTTPRoute/{o['metadata']['name']}", f"timeouts.request {to} is shorter than --drain-timeout {drain:g} s")
    # EPP
    efile, epp_dep = next(((f, o) for f, o in objs if o.get("kind") == "Deployment" and o is not ms["dep"]), (None, None))
    if epp_dep is None:
        return err("k8s", "no EPP Deployment")
    en = epp_dep["metadata"]["name"]
    where = f"k8s/{efile}: Deployment/{en}"
    epod = epp_dep["spec"]["template"]["spec"]
    ec = epod["containers"][0]
    if len(epod["containers"]) > 1:
        ec = next((c for c in epod["containers"] if c["name"] == "epp"), ec)
    image = ec["image"].rsplit(":", 1)[0]
    flavor = EPP_FLAVORS.get(image)
    if flavor is None:
        return err(where, f"unknown EPP image {ec['image']}: the checks know {sorted(EPP_FLAVORS)}")
    eargs, etwice = flag_values(ec.get("args", []))
    for f in etwice:
        err(where, f"{f} given twice")
    if eargs.get("--pool-name") != pname:
        err(where, f"--pool-name {eargs.get('--pool-name')} is not the InferencePool {pname}")
    if "--pool-namespace" in eargs:
        v = eargs["--pool-namespace"] or ""
        for ref_ in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", v):
            if ref_ not in {e["name"] for e in ec.get("env", [])}:
                err(where, f"--pool-namespace refers to $({ref_}) but no env var defines it")
    if epp_svc is not None:
        eports = {p.get("name"): p["containerPort"] for p in ec.get("ports", [])}
        for p in epp_svc["spec"]["ports"]:
            tp = p.get("targetPort", p["port"])
            if (isinstance(tp, str) and tp not in eports) or (isinstance(tp, int) and tp not in eports.values()):
                err(f"k8s/{efile}: Service/{ref['name']}", f"targetPort {tp!r} is not an EPP container port")
        grpc_port = eargs.get("--grpc-port", "9002")
        if int(grpc_port) != eports.get(svc_ports.get(ref.get("port", {}).get("number", 9002), {}).get("targetPort"), int(grpc_port)):
            err(where, f"--grpc-port {grpc_port} is not the port the EPP Service forwards to")
    metric_flags = ("--total-queued-requests-metric", "--kv-cache-usage-percentage-metric", "--lora-info-metric")
    if flavor == "gie":
        for flag in metric_flags:
            if flag not in eargs:
                err(where, f"{flag} not set: the EPP's default may name a metric treespark does not export")
                continue
            name = (eargs[flag] or "").split("{")[0].strip()
            if name and f'"{name}' not in metrics_src:
                err(where, f"{flag} {name}: src/server does not export this metric")
            notes.append(f"{label}: EPP {flag} = {name or '(off)'}" + (" (exported by src/server)" if name else ""))
    else:
        for flag in sorted(set(eargs) & set(metric_flags + ("--total-running-requests-metric", "--cache-info-metric"))):
            err(where, f"{flag}: llm-d's scheduler rejects the metric flags when they are set (deprecatedMetricFlags in its "
                "server options); map metrics in the config's core-metrics-extractor engineConfigs")
    if epod.get("terminationGracePeriodSeconds", 30) < grace:
        err(where, "its grace period should be at least the model servers' (it routes during their drain)")
    mounts = {m["name"]: m["mountPath"] for m in ec.get("volumeMounts", [])}
    cfg_file = eargs.get("--config-file")
    cm_name = next((v["configMap"]["name"] for v in epod.get("volumes", [])
                    if "configMap" in v and v["name"] in mounts and cfg_file and cfg_file.startswith(mounts[v["name"]] + "/")), None)
    _, cm = first(objs, "ConfigMap", cm_name) if cm_name else (None, None)
    if cm is None:
        return err(where, f"--config-file {cfg_file} is not a key of a mounted ConfigMap in deploy/k8s")
    key = os.path.basename(cfg_file)
    cwhere = f"k8s/{efile}: ConfigMap/{cm_name}[{key}]"
    if key not in cm.get("data", {}):
        return err(cwhere, f"no key {key}")
    try:
        cfg = yaml.safe_load(cm["data"][key])
    except yaml.YAMLError as e:
        return err(cwhere, f"YAML does not parse: {e}")
    n_before = len(errors)
    validate(cfg, EPP_CONFIG if flavor == "gie" else LLMD_EPP_CONFIG, cwhere, True, top=False)
    if len(errors) > n_before:
        return
    types = EPP_PLUGIN_TYPES if flavor == "gie" else LLMD_PLUGIN_TYPES
    names, by_type = set(), {}
    for pl in cfg.get("plugins", []):
        t = pl.get("type")
        if t not in types:
            err(cwhere, f"plugin type {t!r} is not " + ("an in-tree plugin of the v1.0 EPP" if flavor == "gie" else
                                                        "a plugin these checks know for llm-d's scheduler v0.8.0 (LLMD_PLUGIN_TYPES)"))
        if t in EPP_PLUGINS_NOT_FOR_TREESPARK:
            err(cwhere, f"{t}: {EPP_PLUGINS_NOT_FOR_TREESPARK[t]}")
        if t == "prefix-cache-scorer" and not ms["prefix_cache"]:
            err(cwhere, "prefix-cache-scorer: treespark runs with --no-prefix-cache, so prefix affinity buys nothing")
        if flavor == "llm-d" and t in LLMD_PLUGIN_PARAMS:
            validate(pl.get("parameters") or {}, LLMD_PLUGIN_PARAMS[t], f"{cwhere} {t}.parameters", False)
        names.add(pl.get("name", t))
        by_type.setdefault(t, pl)
    for prof in cfg.get("schedulingProfiles", []):
        for r in prof.get("plugins", []):
            if r.get("pluginRef") not in names:
                err(cwhere, f"profile {prof.get('name')} refers to unknown plugin {r.get('pluginRef')!r}")
    wiring = {}
    for src in (cfg.get("dataLayer") or {}).get("sources", []):
        for r in [src["pluginRef"]] + [x["pluginRef"] for x in src.get("extractors", [])]:
            if r not in names:
                err(cwhere, f"dataLayer refers to unknown plugin {r!r}")
        wiring[src["pluginRef"]] = [x["pluginRef"] for x in src.get("extractors", [])]
    if flavor == "llm-d":
        check_llmd_config(cwhere, cfg, by_type, wiring, metrics_src, ms, tport, epod, ec, docker)
    notes.append(f"{label}: EPP {ec['image']} with " + ", ".join(sorted(names)))
    # RBAC: bindings refer to roles and service accounts that exist.
    sas = {o["metadata"]["name"] for f, o in objs if o.get("kind") == "ServiceAccount"}
    roles = {(o["kind"], o["metadata"]["name"]) for f, o in objs if o.get("kind") in ("Role", "ClusterRole")}
    for f, o in objs:
        if o.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
            rr = o["roleRef"]
            if (rr["kind"], rr["name"]) not in roles:
                err(f"k8s/{f}: {o['kind']}/{o['metadata']['name']}", f"roleRef {rr['kind']}/{rr['name']} is not in the set")
            for s in o.get("subjects", []):
                if s["kind"] == "ServiceAccount":
                    if s["name"] not in sas:
                        err(f"k8s/{f}: {o['kind']}/{o['metadata']['name']}", f"subject ServiceAccount {s['name']} is not in the set")
                    if o["kind"] == "ClusterRoleBinding" and not s.get("namespace"):
                        err(f"k8s/{f}: {o['kind']}/{o['metadata']['name']}", "a ServiceAccount subject of a ClusterRoleBinding needs its namespace")
    if epod.get("serviceAccountName") not in sas:
        err(where, "serviceAccountName is not a ServiceAccount in the set")
    if flavor == "llm-d":
        # The scheduler watches InferenceModelRewrites besides InferenceObjectives (GIE v1.5 objects).
        granted = {(g, r) for f, o in objs if o.get("kind") == "Role" for rule in o.get("rules", [])
                   for g in rule.get("apiGroups", []) for r in rule.get("resources", []) if "watch" in rule.get("verbs", [])}
        for need in (("", "pods"), ("inference.networking.k8s.io", "inferencepools"),
                     ("inference.networking.x-k8s.io", "inferenceobjectives"), ("inference.networking.x-k8s.io", "inferencemodelrewrites")):
            if need not in granted:
                err(where, f"its Role does not let it watch {need[1]} ({need[0] or 'core'})")


def check_llmd_config(cwhere, cfg, by_type, wiring, metrics_src, ms, tport, epod, ec, docker):
    """llm-d's scheduler: the metric mapping, and the precise prefix-cache scorer against what treespark publishes."""
    # Metric mapping: the core-metrics-extractor, fed by the metrics-data-source.
    cme = by_type.get("core-metrics-extractor")
    if cme is None:
        err(cwhere, "no core-metrics-extractor: llm-d's scheduler maps the metrics there (engineConfigs)")
    else:
        cname = cme.get("name", "core-metrics-extractor")
        if not any(cname in ex for ex in wiring.values()):
            err(cwhere, f"dataLayer does not feed {cname} from a metrics-data-source")
        params = cme.get("parameters") or {}
        engine = params.get("defaultEngine") or LLMD_DEFAULTS["defaultEngine"]
        user = {e["name"]: e for e in params.get("engineConfigs", [])}
        spec = user.get(engine) or LLMD_DEFAULTS["builtinEngines"].get(engine)
        if spec is None:
            err(cwhere, f"core-metrics-extractor: defaultEngine {engine!r} has no engineConfigs entry")
        else:
            if engine in user:
                for f in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec", "loraSpec", "cacheInfoSpec"):
                    if f not in spec:
                        err(cwhere, f"core-metrics-extractor engine {engine!r}: give {f} too (an engineConfigs entry replaces "
                            "the engine's whole mapping; a missing spec is empty)")
            for f in ("queuedRequestsSpec", "kvUsageSpec"):
                if not spec.get(f):
                    err(cwhere, f"core-metrics-extractor engine {engine!r}: {f} is empty, so its scorer sees nothing")
            for f, v in sorted(spec.items()):
                if f == "name" or not v:
                    continue
                name = v.split("{")[0].strip()
                if f'"{name}' not in metrics_src:
                    err(cwhere, f"core-metrics-extractor engine {engine!r}: {f} {name}: src/server does not export this metric"
                        + (" (set loraSpec: \"\"; a missing metric fails every poll)" if f == "loraSpec" else ""))
            notes.append("llm-d metric mapping: " + ", ".join(f"{f}={spec.get(f) or '(off)'}" for f in
                                                              ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec", "loraSpec", "cacheInfoSpec")))
    pps = by_type.get("precise-prefix-cache-scorer")
    if pps is None:
        return
    pname = pps.get("name", "precise-prefix-cache-scorer")
    params = pps.get("parameters") or {}
    kv, flags = ms["kv"], ms["flags"]
    # 1. Events: the replicas publish, on the port the scorer dials, under a topic it parses.
    if not ms["prefix_cache"]:
        err(cwhere, f"{pname}: treespark runs with --no-prefix-cache (no blocks, no events)")
    if kv is None:
        return err(cwhere, f"{pname}: the treespark args carry no --kv-events, so the scorer would index nothing")
    kec = params.get("kvEventsConfig") or {}
    if kec.get("zmqEndpoint"):
        err(cwhere, f"{pname}: kvEventsConfig.zmqEndpoint {kec['zmqEndpoint']!r} is the centralized mode (the scheduler binds, "
            "publishers connect); treespark's publisher only binds, so use per-pod discovery (discoverPods: true)")
    if not kec.get("discoverPods", LLMD_DEFAULTS["discoverPods"]):
        err(cwhere, f"{pname}: kvEventsConfig.discoverPods is false, and there is no endpoint to read events from")
    sport = (kec.get("podDiscoveryConfig") or {}).get("socketPort", LLMD_DEFAULTS["socketPort"])
    if kv["port"] is not None and sport != kv["port"]:
        err(cwhere, f"{pname}: podDiscoveryConfig.socketPort {sport} is not the port of treespark's --kv-events ({kv['port']})")
    tfilter = kec.get("topicFilter", LLMD_DEFAULTS["topicFilter"])
    if not kv["topic"].startswith(tfilter):
        err(cwhere, f"{pname}: topicFilter {tfilter!r} is not a prefix of treespark's --kv-events-topic {kv['topic']!r} "
            "(the subscription would drop every message)")
    if kv["pod"] is None:
        err(cwhere, f"{pname}: treespark's --kv-events-topic must be kv@<pod>@<model>")
    else:
        m = re.fullmatch(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\):([0-9]+)", kv["pod"])
        if m is None or env_field(ms["container"], m.group(1)) != "status.podIP" or int(m.group(2)) != tport:
            err(cwhere, f"{pname}: the topic's pod id {kv['pod']!r} must be $(POD_IP):{tport} (POD_IP from status.podIP): the "
                "scorer names endpoints \"<address>:<port>\" and looks up the blocks filed under the topic's pod id")
    # 2. Keys: the same block size (the scorer re-hashes the events' token ids in its own blocks).
    bs = (params.get("tokenProcessorConfig") or {}).get("blockSize", LLMD_DEFAULTS["blockSize"])
    if bs != ms["block"]:
        err(cwhere, f"{pname}: tokenProcessorConfig.blockSize {bs} != treespark's --prefix-block-tokens {ms['block']}")
    # 3. Pod discovery from the data layer.
    if kec.get("discoverPods", LLMD_DEFAULTS["discoverPods"]) and not any(pname in ex for src, ex in wiring.items()
                                                                         if by_type.get("endpoint-notification-source") and
                                                                         src == by_type["endpoint-notification-source"].get("name", "endpoint-notification-source")):
        err(cwhere, f"{pname}: wire endpoint-notification-source -> {pname} in dataLayer (without it subscriptions open only "
            "while scoring and are never closed when a pod goes)")
    # 4. Tokenization: the served model's own tokenizer files, through the sidecar.
    tok = by_type.get("tokenizer")
    pool = (params.get("indexerConfig") or {}).get("tokenizersPoolConfig")
    sources = [(f"tokenizer", tok.get("parameters") or {}, (tok.get("parameters") or {}).get("udsTokenizerConfig"))] if tok else []
    if pool:
        sources.append(("indexerConfig.tokenizersPoolConfig", pool, pool.get("uds")))
    if not sources:
        err(cwhere, f"{pname}: no tokenizer plugin and no indexerConfig.tokenizersPoolConfig: requests cannot be tokenized")
    models = {p["modelName"] for _, p, _ in sources if p.get("modelName")}
    if len(models) > 1:
        err(cwhere, f"{pname}: the tokenizer plugin and tokenizersPoolConfig load different tokenizers {sorted(models)}")
    for what, p, uds in sources:
        sock = (uds or {}).get("socketFile", "/tmp/tokenizer/tokenizer-uds.socket")
        check_uds(cwhere, what, sock, epod, ec)
        if p.get("modelName"):
            check_tokenizer_files(cwhere, what, p["modelName"], epod, ec, ms, docker)
    # 5. Tiers and weights.
    medium = (kv_event_medium() or "").lower()
    backends = (params.get("indexerConfig") or {}).get("kvCacheBackendConfigs")
    weights = {b["name"]: b["weight"] for b in backends} if backends else {"gpu": 1.0, "cpu": 0.8}
    notes.append(f"llm-d {pname}: {bs}-token blocks, events from tcp://<pod IP>:{sport} topic {kv['topic']!r} (filter {tfilter!r}); "
                 f"treespark's medium {medium!r} weighs {weights.get(medium, 1.0)}")
    prof_w = {r["pluginRef"]: r.get("weight", 1) for prof in cfg.get("schedulingProfiles", []) for r in prof.get("plugins", [])}
    load = [prof_w[n] for n in ("queue-scorer", "kv-cache-utilization-scorer") if n in prof_w]
    if load and prof_w.get(pname, 0) <= max(load):
        notes.append(f"llm-d {pname}: weight {prof_w.get(pname, 0)} is not above the load scorers' ({max(load)})")


def check_uds(cwhere, what, sock, epod, ec):
    """The tokenizer socket's folder is one volume, mounted at the same path in the EPP container and a sidecar."""
    folder = os.path.dirname(sock)
    vol = next((m["name"] for m in ec.get("volumeMounts", []) if m["mountPath"].rstrip("/") == folder), None)
    if vol is None:
        return err(cwhere, f"{what}: the EPP container mounts nothing at {folder} (the tokenizer socket's folder)")
    side = [c for c in epod["containers"] if c is not ec and any(m["name"] == vol and m["mountPath"].rstrip("/") == folder
                                                                 for m in c.get("volumeMounts", []))]
    if not side:
        err(cwhere, f"{what}: no sidecar container shares volume {vol} at {folder}, where the tokenizer service listens")


def check_tokenizer_files(cwhere, what, model_name, epod, ec, ms, docker):
    """An absolute modelName is a folder the sidecar loads: a volume an init container fills with the served model's
    tokenizer files from the treespark image. Anything else is downloaded from a hub by name."""
    if not os.path.isabs(model_name):
        notes.append(f"llm-d {what}: modelName {model_name!r} is fetched from a hub by the tokenizer sidecar; it must be "
                     "the served model's tokenizer")
        return
    side = [c for c in epod["containers"] if c is not ec]
    mounts = [(c, m) for c in side for m in c.get("volumeMounts", []) if model_name.startswith(m["mountPath"].rstrip("/") + "/")]
    if not mounts:
        return err(cwhere, f"{what}: modelName {model_name} is not under a volume mounted in the tokenizer sidecar")
    vol = mounts[0][1]["name"]
    inits = [c for c in epod.get("initContainers", []) if any(m["name"] == vol for m in c.get("volumeMounts", []))]
    if not inits:
        return err(cwhere, f"{what}: nothing fills volume {vol} with the tokenizer files of {model_name}")
    tc = ms["container"]
    for ic in inits:
        if ic["image"] != tc["image"]:
            err(cwhere, f"{what}: init container {ic['name']} runs {ic['image']}, not the treespark image {tc['image']} "
                "(whose model folder the server tokenizes with)")
        text = " ".join(ic.get("command", []) + ic.get("args", []))
        model_dir = ms["model"].rstrip("/")
        for needed in ("tokenizer.json", "tokenizer_config.json"):
            src = f"{model_dir}/{needed}"
            if src not in text:
                err(cwhere, f"{what}: init container {ic['name']} does not copy {src} (the served model's {needed})")
        if model_name.rstrip("/") not in text:
            err(cwhere, f"{what}: init container {ic['name']} does not write to {model_name}")
        # Every file it copies from the image exists in the repository at the path the Dockerfile copies from.
        for path in re.findall(r"(/opt/treespark/models/[^\s'\"]+)", text):
            rel = None
            for srcs, dest in (docker or {}).get("copies", []):
                d = dest.rstrip("/")
                if path == d or path.startswith(d + "/"):
                    rel = os.path.join(srcs[0].rstrip("/"), path[len(d) + 1:]) if path != d else srcs[0]
            if rel is None:
                err(cwhere, f"{what}: {path} is not copied into the image by deploy/Dockerfile")
            elif not os.path.exists(os.path.join(ROOT, rel)):
                err(cwhere, f"{what}: {path} comes from {rel}, which does not exist in the repository")


def check_kustomization(objs):
    """The deployable sets: the kustomization's resources, and each EPP variant swapped in for the file it replaces."""
    path = os.path.join(K8S, "kustomization.yaml")
    with open(path) as f:
        k = yaml.safe_load(f)
    listed = list(k.get("resources", []))
    for r in listed:
        if not os.path.exists(os.path.join(K8S, r)):
            err("k8s/kustomization.yaml", f"resource {r} does not exist")
    files = {f for f, _ in objs}
    for name in sorted(files - set(listed)):
        if name not in EPP_VARIANTS:
            err("k8s/kustomization.yaml", f"{name} is not listed in resources (nor a known EPP variant)")
    sets = {"default": set(listed)}
    for variant, replaces in EPP_VARIANTS.items():
        if variant in files and variant not in listed:
            if replaces not in listed:
                err("k8s/kustomization.yaml", f"{variant} replaces {replaces}, which is not listed")
            sets[variant] = (set(listed) - {replaces}) | {variant}
    ns = k.get("namespace")
    for f, o in objs:
        if o.get("kind") == "ClusterRoleBinding":
            for s in o.get("subjects", []):
                if s.get("kind") == "ServiceAccount" and ns and s.get("namespace") != ns:
                    err(f"k8s/{f}: ClusterRoleBinding/{o['metadata']['name']}", f"subject namespace {s.get('namespace')} != kustomization namespace {ns}")
    return sets


def main():
    objs = [(f, o) for f, o in load_objects() if o.get("kind") != "Kustomization"]
    for f, o in objs:
        key = (o.get("apiVersion"), o.get("kind"))
        where = f"k8s/{f}: {o.get('kind')}/{o.get('metadata', {}).get('name')}"
        if key not in SCHEMAS:
            err(where, f"no schema for {key} in the checker")
            continue
        validate(o, SCHEMAS[key], where, o.get("kind") in CRD_KINDS, top=True)
    if errors:  # cross checks assume the shapes above
        return report(objs)
    docker = check_dockerfile()
    sets = check_kustomization(objs)
    ms = check_model_servers([(f, o) for f, o in objs if f in sets["default"]], docker)
    if ms is not None:
        for label, files in sets.items():
            check_set(label, [(f, o) for f, o in objs if f in files], ms, docker)
    return report(objs, sets)


def report(objs, sets=None):
    kinds = {}
    for _, o in objs:
        kinds[o.get("kind")] = kinds.get(o.get("kind"), 0) + 1
    print("check_manifests: parsed " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    for label, files in (sets or {}).items():
        print(f"  set {label}: " + ", ".join(sorted(files)))
    for n in dict.fromkeys(notes):
        print("  " + n)
    unique = list(dict.fromkeys(errors))  # checks shared by the sets report once
    for e in unique:
        print("ERROR " + e)
    print(f"check_manifests: {len(unique)} error(s)")
    return 1 if unique else 0


if __name__ == "__main__":
    sys.exit(main())
