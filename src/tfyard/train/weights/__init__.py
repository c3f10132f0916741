"""Where the weights start: weight files of every kind, the strict init from trained weights,
and which layers stay frozen."""
