"""Compose values clawc reads or rewrites must have a shape it understands, checked first."""

from __future__ import annotations

from clawpod.compiler.pod_reader import PodReader

# key: (accepted container types, accepted item types when it is a list)
_SERVICE_SHAPES: dict[str, tuple[tuple[type, ...], tuple[type, ...]]] = {
    "environment": ((dict, list), (str,)),
    "env_file": ((str, list), (str, dict)),
    "depends_on": ((dict, list), (str,)),
    "volumes": ((list,), (str, dict)),
    "networks": ((dict, list), (str,)),
    "build": ((str, dict), ()),
    "expose": ((list,), (str, int)),
    "ports": ((list,), (str, int, dict)),
}
_TYPE_NAMES = {dict: "a mapping", list: "a list", str: "a string", int: "a number"}


def check_shapes(reader: PodReader) -> None:
    """Reject compose values of a shape clawc cannot rewrite, before it touches them."""
    for section in ("networks", "volumes", "configs", "secrets"):
        value = reader.data.get(section)
        if value is not None and not isinstance(value, dict):
            raise reader.fail(f"'{section}' must be a mapping", (section,))
    for name, definition in reader.services.items():
        if not isinstance(definition, dict):
            raise reader.fail("a service must be a mapping", ("services", name), name)
        for key, (shapes, items) in _SERVICE_SHAPES.items():
            value = definition.get(key)
            if value is None:
                continue
            expected = " or ".join(_TYPE_NAMES[t] for t in shapes)
            if not isinstance(value, shapes) or isinstance(value, bool):
                raise reader.fail(f"'{key}' must be {expected}", ("services", name, key), name)
            if isinstance(value, list):
                for index, item in enumerate(value):
                    if not isinstance(item, items) or isinstance(item, bool):
                        allowed = " or ".join(_TYPE_NAMES[t] for t in items)
                        raise reader.fail(
                            f"items of '{key}' must be {allowed}",
                            ("services", name, key, index),
                            name,
                        )
