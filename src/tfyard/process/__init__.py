"""What a process reads of itself and of others, one way each: numbers from its environment
(`envvars`), the CPUs it may run on (`cpus`), whether another process lives (`liveness`);
and how it puts a file in place whole (`staged`), so that a kill or another process's write
never leaves a torn one. Low in the house (only `errors` below it), so every layer may use
them."""
