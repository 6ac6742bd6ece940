"""The metadata backends the contract tests run on, named once for every test module."""

# Backends where a second handle reaches the same data: for tests of several clients.
SHARED_BACKENDS = ["sqlite", "etcd", "etcd-tls-auth"]
