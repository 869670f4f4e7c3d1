"""Rendering settings: the stated figures and label keys templates need but a plan does not carry.

They live in `settings.yaml` next to the templates, so an organisation overrides them the same way it overrides a
template: a `settings.yaml` in `--templates DIR` is merged over the packaged one, key by key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from infra.errors import IntentError, Location, Problem
from infra.intent.yamlio import read_text
from infra.limits import check_tree, scan_yaml

SETTINGS_FILE = "settings.yaml"


class Settings(BaseModel):
    """What `settings.yaml` holds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    load_bandwidth_mb_s: float = Field(gt=0)
    """Rate at which a pod reads model weights (download or network volume), in MB/s: with the weight bytes it
    sizes the startup probe."""
    engine_init_s: float = Field(ge=0)
    """Seconds an engine needs after loading weights (graph capture, KV-cache allocation, warm-up)."""
    probe_period_s: int = Field(ge=1)
    service_account: str
    """serviceAccountName of every serving pod (an existing account); empty renders one per service."""
    hf_token_secret: str
    """Secret (key `token`) with the Hugging Face token, referenced optionally."""
    zone_label: str
    switch_label: str
    """Node label whose value names the leaf switch; prefill and decode of one group share its value."""
    shm_fraction: float = Field(gt=0, le=1)
    """/dev/shm size as a share of the pod's memory request."""
    cpu_per_device: int = Field(ge=1)
    memory_gi_per_device: int = Field(ge=1)
    cpu_stage_memory_gi_per_core: int = Field(ge=1)
    """Memory of a CPU pipeline stage's pod per core it requests."""
    cpu_device_reserved_cpus: int = Field(ge=0)
    """CPUs (hardware threads) of each CPU device (socket) left to the kubelet, the system and DaemonSets: a pod on
    CPU devices requests the sockets' threads less this many per socket."""
    cpu_device_reserved_memory_gi: int = Field(ge=0)
    """Memory of each CPU device left to the kernel, the kubelet and DaemonSets, GiB."""
    cpu_engine_runtime_gi: float = Field(ge=0)
    """Memory one engine rank on a CPU device uses besides its weights and KV cache (activations, oneDNN scratch, the
    Python runtime), GiB: the KV cache it is given is what the plan leaves the rank after both."""
    prometheus_url: str
    """Prometheus that KEDA queries for the engines' running-request gauge."""
    weights_headroom: float = Field(ge=1)
    """emptyDir size as a multiple of the weight bytes (tokenizer, config, download temporaries)."""
    epp_image: str = "ghcr.io/llm-d/llm-d-inference-scheduler:v0.7.1"
    """Image of the endpoint picker the `llm-d` target deploys next to each InferencePool (llm-d's inference
    scheduler, which carries the Gateway API Inference Extension's plugins and llm-d's prefill/decode ones)."""
    gateway: str = Field(default="inference-gateway",
                         pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """The Gateway (`name` or `namespace/name`) each service's HTTPRoute attaches to when the cluster serves the
    Gateway API without the Inference Extension."""
    dra_device_classes: dict[str, str] = {}
    """DRA DeviceClass per device vendor, and `rdma` for RDMA NICs, used when the cluster lists `dra`."""


def load_settings(override_dir: Path | None) -> Settings:
    """The packaged settings, with an override directory's `settings.yaml` merged over them."""
    from importlib import resources

    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    data: dict[str, Any] = YAML(typ="safe").load(
        (resources.files("infra") / "templates" / SETTINGS_FILE).read_text(encoding="utf-8"))
    source = f"templates/{SETTINGS_FILE}"
    if override_dir is not None and (override_dir / SETTINGS_FILE).is_file():
        source = str(override_dir / SETTINGS_FILE)
        try:
            text = read_text(override_dir / SETTINGS_FILE, "settings")  # bounded in size, UTF-8
            scan_yaml(text, source, IntentError)  # nesting and alias bombs refused before a tree is built
            extra = YAML(typ="safe").load(text) or {}
            check_tree(extra, source, error=IntentError)
        except YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise IntentError(Problem(f"YAML syntax error: {getattr(exc, 'problem', exc)}",
                                      Location(source, mark.line + 1 if mark else None),
                                      "fix the settings file's syntax")) from None
        if not isinstance(extra, dict):
            raise IntentError(Problem("settings file must hold a mapping", Location(source, 1),
                                      "write `key: value` lines, e.g. `switch_label: example.com/leaf`"))
        data = {**data, **extra}
    try:
        return Settings.model_validate(data)
    except PydanticValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise IntentError(Problem(err["msg"], Location(source, path=field),
                                  f"see the fields documented in the packaged {SETTINGS_FILE}")) from None
