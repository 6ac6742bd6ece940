"""JetStream consumers, pull and push: configuration, requests, progress, persistence, and the
one delivery loop that serves both (engine.py)."""
