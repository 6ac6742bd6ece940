"""The web console at `/` on the monitoring port: streams, consumers and their lag, agents,
object traffic and its cost, compaction, and plots of the recent past.

No build step: a static page, a hand-written script and a style sheet (`static/`, package
data), served as they are. The script reads nats-server's endpoints (/varz, /jsz, /healthz)
and `/console/api/overview` (the history's series, the bill, the jobs' state), and draws the
plots as inline SVG. `routes.console_routes` mounts it on the monitoring application.
"""
