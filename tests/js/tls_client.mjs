// nats.js over mutual TLS, run by tests/security/test_tls.py:
//
//     node tests/js/tls_client.mjs HOST:PORT CA_FILE CERT_FILE KEY_FILE
//
// Connects with the client certificate, creates a stream, publishes and reads the message
// back. Runs under harness.mjs; its result is {"echo": <the data read back>}.

import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { ok, run, step } from "./harness.mjs";

run(async (server, caFile, certFile, keyFile) => {
  const nc = await connect({ servers: server, tls: { caFile, certFile, keyFile }, timeout: 10000 });
  ok("connect");
  step("publish and read back");
  const jsm = await jetstreamManager(nc, { timeout: 10000 });
  await jsm.streams.add({ name: "JSTLS", subjects: ["jstls.>"] });
  const ack = await jetstream(nc).publish("jstls.a", "over tls");
  const msg = await jsm.streams.getMessage("JSTLS", { seq: ack.seq });
  ok("publish and read back");
  await nc.drain();
  return { echo: msg.string() };
});
