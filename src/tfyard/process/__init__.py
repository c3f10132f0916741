"""What a process reads of itself and of others, one way each: numbers from its environment
(`envvars`), whether another process lives (`liveness`); and how it puts a file in place
whole (`staged`), so that a kill or another process's write never leaves a torn one. Low in
the house (only `errors` below it), so every layer may use them."""
