"""The parent process of a run: plans and runs the collection passes, each in its own child process, and shows
their progress."""
