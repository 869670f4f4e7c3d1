"""Every rule validation applies: id, severity, what it checks, how to fix a finding. `infra validate --rules`
lists this table; checks create findings only through `Rule.at`, so an id cannot be used without being listed."""

from __future__ import annotations

from dataclasses import dataclass

from infra.validators.findings import Finding, Severity


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    layer: str
    title: str
    fix: str

    def at(self, file: str, line: int | None, obj: str, message: str, *, field: str = "",
           fix: str | None = None, severity: Severity | None = None) -> Finding:
        """A finding of this rule; `fix` refines the generic hint with the concrete value to write."""
        return Finding(file=file, line=line or 0, rule=self.id, object=obj, message=message,
                       severity=severity or self.severity, fix=fix or self.fix, field=field)


_ALL = [
    # Reading
    Rule("YAML001", "error", "input", "file is readable YAML",
         "fix the YAML syntax at the position shown (indent with spaces; quote values containing ': ')"),
    Rule("YAML002", "error", "input", "every document is a mapping with apiVersion, kind and metadata.name",
         "write each object as a mapping starting with apiVersion, kind and metadata.name"),
    # Schema
    Rule("SCH001", "error", "schema", "built-in kinds match the Kubernetes schema (strict: no unknown fields)",
         "correct the field's name or value as the Kubernetes API reference describes it"),
    Rule("SCH002", "error", "schema", "custom resources match their CRD schema at the pinned version",
         "correct the field as the custom resource's CRD describes it (see `infra validate --rules` for versions)"),
    Rule("SCH003", "error", "schema", "the kind is known (a built-in kind or a custom resource with a schema)",
         "use a built-in Kubernetes kind or one of the custom resources infra knows, with its exact apiVersion"),
    Rule("SCH004", "error", "schema", "Helm values files (helm/<chart>/*.values.yaml) match the chart's values "
         "schema at the pinned version", "use only the keys and types the chart's values.schema.json allows"),
    Rule("KUS001", "error", "kustomize", "paths a Kustomization lists exist",
         "create the file or directory, or remove it from the kustomization"),
    Rule("KUS002", "error", "kustomize", "a Kustomization uses only kustomize's fields",
         "use a field of kustomize.config.k8s.io/v1beta1 Kustomization (resources, namespace, patches, ...)"),
    Rule("KUS003", "warning", "kustomize", "every manifest beside a kustomization.yaml is listed in it",
         "add the file to the kustomization's resources, or delete it"),
    Rule("KUS004", "error", "kustomize", "every overlay (top-level kustomization) builds with kustomize",
         "fix what `kubectl kustomize DIR` reports (a patch naming no object, a missing field, a conflict)"),
    # Semantic
    Rule("SEM001", "error", "semantic", "a workload's selector matches its pod template's labels",
         "make spec.selector.matchLabels a subset of spec.template.metadata.labels"),
    Rule("SEM002", "warning", "semantic",
         "a Service / InferencePool / PodMonitor / PDB selector selects pods in the tree",
         "use the labels of the pod template it should select"),
    Rule("SEM003", "error", "semantic", "names are DNS-1123 (objects, containers, ports, volumes)",
         "use lowercase letters, digits and '-', starting and ending with a letter or digit"),
    Rule("SEM004", "error", "semantic", "extended resources (devices) are whole numbers",
         "request a whole number of devices; share a device with the memory/core slice resources instead"),
    Rule("SEM005", "error", "semantic", "extended resources have requests equal to limits, and are in limits",
         "set the same value under resources.limits and resources.requests"),
    Rule("SEM006", "error", "semantic", "tensor x pipeline x data parallel equals the devices of one group",
         "make --tensor/--pipeline/--data-parallel sizes multiply to the devices per pod x pods per group"),
    Rule("SEM007", "error", "semantic", "probes use a port the container declares",
         "probe a port listed in the container's ports (by number or name)"),
    Rule("SEM008", "error", "semantic", "a Service's targetPort (an InferencePool's targetPorts, a PodMonitor's "
         "endpoint port) exists in the pods it selects",
         "point targetPort (port) at a containerPort (number or name) of the selected pods"),
    Rule("SEM009", "error", "semantic", "names are unique: objects, containers, volumes, env vars, ports",
         "rename or remove the duplicate"),
    Rule("SEM010", "error", "semantic", "quantities parse (resources, sizes)",
         "write a Kubernetes quantity such as 500m, 2, 16Gi or 1e3"),
    Rule("SEM011", "error", "semantic", "references resolve: volume mounts, resource claims, DRA constraints",
         "name a volume / claim / request that is declared in the same pod or template"),
    Rule("SEM012", "warning", "semantic", "an engine container's command is recognised (else its parallel "
         "layout is not checked)", "launch the engine with the command its catalog entry names, or add `cli` "
         "to the framework's catalog entry"),
    Rule("SEM013", "error", "semantic", "a HAMi slice keeps the device count at 1 and memory within the device",
         "request count 1 with the memory/core slice resources, or whole devices without them"),
    Rule("SEM014", "error", "semantic", "DRA device selectors are valid CEL",
         "write a CEL expression over device.driver / device.attributes / device.capacity, e.g. "
         "device.driver == \"gpu.nvidia.com\""),
    Rule("SEM015", "error", "semantic", "prefill and decode workers carry the KV connector that moves the KV cache "
         "between them", "give the engine's KV-transfer setting (vLLM --kv-transfer-config, SGLang "
         "--disaggregation-mode, TensorRT-LLM cache_transceiver_config), as `infra render` writes it"),
    Rule("SEM016", "error", "semantic", "a Volcano PodGroup gangs exactly the pods of one group: its minMember "
         "equals the pods that name it, and no LeaderWorkerSet shares one PodGroup between its groups",
         "one PodGroup per gang with minMember = its pods; for a LeaderWorkerSet let the LWS controller create "
         "one per group (gangSchedulingManagement.schedulerProvider: volcano) and name none in its templates"),
    # Cluster profile
    Rule("PRO001", "error", "profile", "extended resources are ones the cluster offers",
         "use a resource name of the cluster profile's conventions.devices (or fix the profile)"),
    Rule("PRO002", "error", "profile", "node labels used by nodeSelector / affinity exist in the profile",
         "select nodes with a pool's node_selector labels, or add the label to the profile's pool"),
    Rule("PRO003", "error", "profile", "a pod's device request fits one node of a pool",
         "request at most devices_per_node devices per pod; span nodes with a LeaderWorkerSet"),
    Rule("PRO004", "error", "profile", "a custom resource's apiVersion is installed in the cluster",
         "use the version the profile's conventions.crds lists, or install the CRD"),
    Rule("PRO005", "warning", "profile", "pods use the cluster's scheduler and namespace",
         "set schedulerName / namespace as the profile's conventions say"),
    # Security
    Rule("SEC001", "error", "security", "no privileged containers and no privilege escalation",
         "remove privileged: true and set allowPrivilegeEscalation: false"),
    Rule("SEC002", "error", "security", "no hostNetwork, hostPID, hostIPC or hostPath",
         "use the pod network, and emptyDir / PVC volumes instead of hostPath"),
    Rule("SEC003", "error", "security", "added capabilities are only what RDMA needs (IPC_LOCK)",
         "add only IPC_LOCK; drop other capabilities"),
    Rule("SEC004", "error", "security", "secrets only by reference (no literal token-looking env values)",
         "store the value in a Secret and use env[].valueFrom.secretKeyRef"),
    Rule("SEC005", "error", "security", "images are pinned (a tag other than latest, or a digest)",
         "pin the image to a version tag or @sha256 digest"),
    Rule("SEC006", "warning", "security", "containers set resource limits (cpu/memory)",
         "set resources.limits.memory (and cpu) for every container"),
    Rule("SEC007", "warning", "security", "pods name their service account explicitly",
         "set spec.serviceAccountName (and automountServiceAccountToken: false when it needs no API access)"),
    # Plan consistency
    Rule("PLN001", "error", "plan", "every allocation of the plan has its objects",
         "render the plan again (`infra render PLAN -o DIR`)"),
    Rule("PLN002", "error", "plan", "every workload object belongs to an allocation of the plan",
         "remove the object or render the plan again"),
    Rule("PLN003", "error", "plan", "replicas match the plan", "set replicas to the plan's value"),
    Rule("PLN004", "error", "plan", "engine arguments match the plan's engine settings and layout",
         "write the argument the plan decides (see the allocation's engines and parallel)"),
    Rule("PLN005", "error", "plan", "device requests match the plan (count, slice memory and cores)",
         "request what the allocation's pool resources and devices_per_worker / share say"),
    Rule("PLN006", "warning", "plan", "engine arguments could be read for the framework",
         "add `cli` to the framework's catalog entry so its arguments can be checked"),
    Rule("PLN007", "error", "plan", "the plan-fingerprint annotation matches the plan",
         "render the manifests from this plan again"),
    Rule("PLN008", "error", "plan", "pods select the nodes of the allocation's pool",
         "use the pool's node_selector as the pod's nodeSelector"),
    Rule("PLN009", "error", "plan", "pods on CPU devices request their sockets' cores and memory (no device "
         "resources) and carry the engine's CPU environment, its KV cache within the pod's memory",
         "request cpu and memory within the allocation's sockets, requests equal to limits, no extended resources, "
         "and set the framework's CPU environment (`infra render` does)"),
    Rule("PLN010", "error", "plan", "a deployment target's engine image is the one the plan's framework runs on "
         "the allocation's device there", "use the image `infra render --target` writes for the framework"),
    Rule("PLN011", "error", "plan", "a service the plan routes by an HTTPRoute has it, with backendRefs to its "
         "allocations' Services carrying exactly the plan's weights (routing.weights), each Service selecting "
         "its allocation's pods", "render the plan again, or set each backendRef's weight to the plan's value"),
    Rule("PLN012", "error", "plan", "where the cluster runs the Prometheus Operator, each service's PrometheusRule "
         "<service>-objectives is this plan's (fingerprint) and watches every objective its engines' series "
         "can, at the plan's targets, on the series of the plan's engines (or the target's frontend)", "render the plan again (`infra render PLAN -o DIR`)"),
    # Pipelines (plan consistency of spec.pipelines)
    Rule("PIP001", "error", "plan", "every pipeline stage has its stage config (ConfigMap <stage>-stage, stage.yaml)",
         "render the plan again (`infra render PLAN -o DIR`)"),
    Rule("PIP002", "error", "plan", "a stage config matches the plan (stage, kind, model, layout and sp, devices, "
         "replicas, streams)", "write what the plan decides for the stage (or render the plan again)"),
    Rule("PIP003", "error", "plan", "stage connectors join the pipeline's stages as it does, with no dangling address",
         "point inputs/output at the Services of the stages it consumes and feeds, at ports they expose"),
    Rule("PIP004", "error", "plan", "CPU stages have a workload on CPU requesting their cores and no devices",
         "give the stage an image in the intent and request its cpu_cores without device resources"),
    Rule("PIP005", "error", "plan", "a stage's Service selects that stage's serving pods, and only those",
         "select the stage's pod labels (infra.dev/service, infra.dev/stage)"),
    # Live
    Rule("LIV001", "error", "live", "the API server accepts the object (server-side dry run, strict fields)",
         "correct the object as the API server's message says"),
]

RULES: dict[str, Rule] = {r.id: r for r in _ALL}


def rule(rule_id: str) -> Rule:
    return RULES[rule_id]
