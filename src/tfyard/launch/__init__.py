"""Start the processes that will train: a local cluster, Spark tasks, containers."""
