"""The sandbox ``code_run`` executes code in: a backend protocol, bubblewrap, workspaces, outputs."""
