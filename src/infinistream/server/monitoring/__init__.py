"""nats-server's monitoring endpoints, one module per family; `server/monitor.py` serves them."""
