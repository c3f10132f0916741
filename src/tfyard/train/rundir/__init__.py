"""The run directory: what a run leaves and how it survives. Its files are named and handled
through `tfyard.runfiles` (the one seam); here are the checkpoints, the one-writer lease (on
disk or in a bucket), the bucket's publisher, metrics reports, curves and the export."""
