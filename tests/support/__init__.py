"""What the tests share: real agents, real nats-server, etcd, an S3-compatible server and clients,
started as users start them, and small readers of what those wrote."""
