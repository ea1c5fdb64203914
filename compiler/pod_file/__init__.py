"""Reading a pod file: its documents with line numbers, the files it may name, its x-claw blocks
and the names clawc reserves."""
