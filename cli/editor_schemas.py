"""JSON Schemas for editors (``clawc schema descriptor|pod``), generated from the models."""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from ..compiler.pod_file.spec import PodClaw, ServiceClaw
from ..compiler.services.descriptors import Descriptor

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def descriptor_schema() -> dict[str, Any]:
    schema = Descriptor.model_json_schema(by_alias=True)
    return {"$schema": DIALECT, "title": "clawpod service descriptor", **schema}


def pod_schema() -> dict[str, Any]:
    """A compose file whose top level and services may carry ``x-claw``; other keys are free."""
    refs, definitions = models_json_schema(
        [(PodClaw, "validation"), (ServiceClaw, "validation")], ref_template="#/$defs/{model}"
    )
    pod_ref = refs[(PodClaw, "validation")]
    service_ref = refs[(ServiceClaw, "validation")]
    return {
        "$schema": DIALECT,
        "title": "clawpod pod file (docker compose with x-claw)",
        "type": "object",
        "properties": {
            "x-claw": pod_ref,
            "services": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {"x-claw": service_ref},
                },
            },
        },
        "required": ["services"],
        "$defs": definitions.get("$defs", {}),
    }
