// nats.js over mutual TLS, run by tests/security/test_tls.py:
//
//     node tests/js/tls_client.mjs HOST:PORT CA_FILE CERT_FILE KEY_FILE
//
// Connects with the client certificate, creates a stream, publishes and reads the message
// back, and prints {"echo": <its data>} for the Python side.

import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";

const [server, caFile, certFile, keyFile] = process.argv.slice(2);
if (!keyFile) {
  console.error("usage: tls_client.mjs HOST:PORT CA_FILE CERT_FILE KEY_FILE");
  process.exit(2);
}

const nc = await connect({ servers: server, tls: { caFile, certFile, keyFile }, timeout: 10000 });
const jsm = await jetstreamManager(nc, { timeout: 10000 });
await jsm.streams.add({ name: "JSTLS", subjects: ["jstls.>"] });
const ack = await jetstream(nc).publish("jstls.a", "over tls");
const msg = await jsm.streams.getMessage("JSTLS", { seq: ack.seq });
console.log(JSON.stringify({ echo: msg.string() }));
await nc.drain();
