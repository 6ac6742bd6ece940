"""InfiniStream: a NATS JetStream server whose agents keep nothing of their own.

Stream data lives in object storage, metadata in a strongly consistent key-value store.
"""

__version__ = "0.1.0"
