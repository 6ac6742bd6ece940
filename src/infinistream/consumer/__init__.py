"""JetStream pull consumers: configuration, requests, progress and persistence."""
