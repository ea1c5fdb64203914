"""Import graphs of the tree, for the layer and program tests."""

from __future__ import annotations


def assert_no_circles(graph: dict[str, set[str]]) -> None:
    """Fail naming the first circle of ``graph`` (node -> the nodes it imports)."""
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        assert node not in visiting, " -> ".join([*visiting[visiting.index(node) :], node])
        visiting.append(node)
        for dependency in sorted(graph.get(node, set()) - {node}):
            visit(dependency)
        visiting.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
