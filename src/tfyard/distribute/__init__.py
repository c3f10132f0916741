"""Who am I in the cluster, and how do I train."""
