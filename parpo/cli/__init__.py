"""The ``parpo`` command: the top layer; imports every other part lazily."""
