"""Who a client is and what it may do: accounts, users, permissions, TLS.

Below the settings and everything that serves clients: `config` turns the `accounts`,
`authorization` and `tls` blocks into typed specs, `auth` checks a CONNECT against them, and
`identity` is what a connection holds once it is authenticated.
"""
