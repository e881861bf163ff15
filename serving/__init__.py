"""The online endpoint: FastAPI app serving PARPO policies from the registry."""
