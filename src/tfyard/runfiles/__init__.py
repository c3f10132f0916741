"""A run's files: their names (`layout`) and the operations on them (`files`), the one seam
every reader and writer of a run directory goes through, on local disk or a path TensorFlow
opens (a bucket's run is a local copy, published by `train.rundir.bucket`)."""
