"""Content-addressed keys and ninja text (pure), toolchain discovery, the one lock helper and the one build lifecycle."""
