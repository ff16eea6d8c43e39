"""What runs inside the profiled process: the injector that runs the user's script under one pass, step
marking, loop and module tracing."""
