"""The run directory: what a run leaves and how it survives. Its layout and file operations
(`directory`, the one seam every file of a run goes through), checkpoints, the one-writer
lease, preemption, metrics and console reports, curves and the export."""
