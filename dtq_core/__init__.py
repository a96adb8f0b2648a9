"""dtq's engine: keys, Lua scripts, the state machine, submit, worker, scheduler, DLQ, audit."""
