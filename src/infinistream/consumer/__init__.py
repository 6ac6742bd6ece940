"""JetStream consumers, pull and push: configuration, requests, progress, delivery and
persistence."""
