"""What the sidecar keeps on disk: the journal, hidden rounds, stored objects' owners and the
state directory's lock. Approvals and budgets keep their stores beside the rules that use them
in ``governance``."""
