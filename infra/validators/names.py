"""Kubernetes name rules (apimachinery validation): DNS-1123 labels and subdomains, IANA service port names."""

from __future__ import annotations

import re

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def label_problem(name: str) -> str | None:
    """Why `name` is not a DNS-1123 label (max 63), or None."""
    if len(name) > 63:
        return f"{name!r} is {len(name)} characters, more than 63"
    if not DNS1123_LABEL.match(name):
        return f"{name!r} is not a DNS-1123 label (lowercase letters, digits and '-', alphanumeric at both ends)"
    return None


def subdomain_problem(name: str) -> str | None:
    """Why `name` is not a DNS-1123 subdomain (max 253), or None."""
    if len(name) > 253:
        return f"{name!r} is {len(name)} characters, more than 253"
    if not DNS1123_SUBDOMAIN.match(name):
        return f"{name!r} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')"
    return None


def port_name_problem(name: str) -> str | None:
    """Why `name` is not an IANA service name as Kubernetes requires for ports, or None."""
    if len(name) > 15:
        return f"port name {name!r} is longer than 15 characters"
    if not PORT_NAME.match(name) or "--" in name or not re.search(r"[a-z]", name):
        return f"port name {name!r} must be lowercase letters, digits and single '-', with at least one letter"
    return None
