"""Content-addressed keys and ninja text (pure), toolchain discovery, and the one build lifecycle."""
