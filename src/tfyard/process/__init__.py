"""What a process reads of itself and of others, one way each: numbers from its environment
(`envvars`), whether another process lives (`liveness`). Low in the house (only `errors`
below it), so every layer may use them."""
