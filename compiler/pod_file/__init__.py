"""The pod file as written: its documents with line numbers, the files it may name, the names
clawc reserves, and the grammars of its x-claw blocks (grants, providers, governance)."""
