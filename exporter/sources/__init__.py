"""Sources read GPUs (real or simulated) and produce one immutable ``Snapshot`` per collection."""
